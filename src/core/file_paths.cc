#include "core/file_paths.h"

#include <sys/stat.h>

#include <filesystem>
#include <optional>

#include "core/status.h"

namespace dlbench {

namespace fs = std::filesystem;

namespace {

struct Resolved {
  const PathUse* use;
  fs::path path;                              // resolved
  std::optional<std::pair<dev_t, ino_t>> id;  // of an existing file
};

Resolved resolve(const PathUse& use) {
  Resolved r{&use, fs::path(resolved_path(use.path)), std::nullopt};
  struct stat st {};
  if (::stat(use.path.c_str(), &st) == 0) r.id = std::make_pair(st.st_dev, st.st_ino);
  return r;
}

bool same_file(const Resolved& a, const Resolved& b) {
  if (a.id && b.id) return *a.id == *b.id;
  return a.path == b.path;
}

// Whether `inner` lies strictly inside the folder `outer`.
bool inside(const fs::path& inner, const fs::path& outer) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (i == inner.end() || *o != *i) return false;
  }
  return i != inner.end();
}

bool is_output(PathRole role) { return role == PathRole::writes_file || role == PathRole::writes_tree; }
bool is_tree(PathRole role) { return role == PathRole::reads_tree || role == PathRole::writes_tree; }

}  // namespace

std::string resolved_path(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(fs::path(path), ec), ec);
  if (ec) p = fs::absolute(fs::path(path)).lexically_normal();
  std::string text = p.string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  return text;
}

void check_path_uses(const std::vector<PathUse>& uses) {
  std::vector<Resolved> all;
  for (const PathUse& use : uses)
    if (!use.path.empty()) all.push_back(resolve(use));
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = 0; j < all.size(); ++j) {
      if (i == j) continue;
      const Resolved &out = all[i], &other = all[j];
      if (!is_output(out.use->role)) continue;
      const std::string out_flag = out.use->flag, other_flag = other.use->flag;
      if (same_file(out, other) && (j > i || !is_output(other.use->role))) {
        throw_user_error("{} and {} name the same {} ({}): {}; give {} a path of its own", out_flag,
                         other_flag, is_tree(out.use->role) ? "folder" : "file", out.use->path,
                         is_output(other.use->role)
                             ? "one would overwrite the other"
                             : fmt::format("writing {} would destroy what {} reads", out_flag, other_flag),
                         out_flag);
      }
      if (other.use->role == PathRole::reads_tree && inside(out.path, other.path)) {
        throw_user_error("{} {} lies inside {} {}, which this command reads; write it elsewhere", out_flag,
                         out.use->path, other_flag, other.use->path);
      }
      if (out.use->role == PathRole::writes_tree && other.use->role == PathRole::reads_tree &&
          inside(other.path, out.path)) {
        throw_user_error("{} {} holds {} {}, which this command reads; write it elsewhere", out_flag,
                         out.use->path, other_flag, other.use->path);
      }
    }
  }
}

}  // namespace dlbench

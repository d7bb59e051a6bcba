// The GPT-2 family (Radford et al. 2019, as nanoGPT and llm.c build it), layer by layer into a Network.
//
//   gpt2         12 layers, 12 heads, width  768   (124M)
//   gpt2-medium  24 layers, 16 heads, width 1024   (350M)
//   gpt2-large   36 layers, 20 heads, width 1280   (774M)
//   gpt2-xl      48 layers, 25 heads, width 1600   (1.56B)
//                context 1024, vocabulary 50,257 (GPT-2's BPE) padded to 50,304 (a multiple of 64)
//   gpt-mini     4 layers, 4 heads, width 128, context 256, byte-level vocabulary of 256: for tests and
//                the CPU
//
// tokens [B, T] -> token + position embedding -> L pre-LN blocks
//   x = x + attn.c_proj(attention(attn.c_attn(ln_1(x))));  x = x + mlp.c_proj(gelu(mlp.c_fc(ln_2(x))))
// -> ln_f -> logits = x wte^T (the head tied to the token embedding) -> cross-entropy over the real
// vocabulary (the padded columns are never predicted) against targets [B, T].
//
// Initialisation, GPT-2's: every weight N(0, 0.02), the residual projections (attn.c_proj, mlp.c_proj)
// N(0, (0.02 / sqrt(2 L))^2); biases 0; layer norms weight 1, bias 0.
// Parameter names follow nanoGPT ("transformer.h.0.attn.c_attn.weight", weights [out, in] as
// torch.nn.Linear stores them; Hugging Face's GPT-2 names them alike but stores Conv1D weights
// transposed). The tied head has no parameter of its own (nanoGPT's lm_head.weight is wte).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"

namespace dlbench {

struct GptSpec {
  int64_t layers = 0, heads = 0, channels = 0;
  int64_t context = 0;       // positions: the longest sequence
  int64_t vocab = 0;         // real tokens
  int64_t padded_vocab = 0;  // rows of the token table (vocab rounded up to a multiple of 64)
};

const std::vector<std::string>& gpt_model_names();
bool is_gpt_model(const std::string& name);
// UserError for a name that is no GPT model.
GptSpec gpt_spec(const std::string& name);

// Parameters of `spec` with the vocabulary `vocab_rows` rows long (spec.vocab: GPT-2 124M has 124,439,808;
// spec.padded_vocab: what the network holds).
int64_t gpt_parameter_count(const GptSpec& spec, int64_t vocab_rows);

// Builds (but does not finalize) the model for sequences of `seq_len` tokens (0: the context). The network's
// batch (net_options.batch) counts sequences. UserError for an unknown name or a sequence longer than the
// context.
Model build_gpt(const std::string& name, Backend& backend, const NetworkOptions& net_options,
                int64_t seq_len);

}  // namespace dlbench

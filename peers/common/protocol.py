"""The measuring protocol's shared pieces: what every peer trainer does the same way, whatever its framework.

Flags (one line on stderr and status 2 for a bad one), the step-time statistics, the GPU energy of the timed
window (through nvml_energy.py, beside this file), the system description and the atomic JSON write.
Standard library only: a peer imports it after its framework, and exits with status 3 itself when that is
missing.
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import socket
import tempfile

# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags: one line on stderr (no usage dump), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_int(text):
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_int(text):
    value = parse_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text):
    value = parse_int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def batch_size_type(max_refused=None):
    """The type of --batch-size: a number of images (at least 1), or "max". A peer that cannot search for
    the largest batch gives max_refused, the message that refuses "max"; its other errors are then
    positive_int's."""

    def batch_size_arg(text):
        if text == "max":
            if max_refused is not None:
                raise argparse.ArgumentTypeError(max_refused)
            return "max"
        if max_refused is not None:
            return positive_int(text)
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"give a number of images or max, not {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
        return value

    return batch_size_arg


# ---------------------------------------------------------------------------
# Step times
# ---------------------------------------------------------------------------


def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (NumPy's default)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def step_ms(step_seconds):
    """The JSON's step_ms: median, p5, p95 and mean of the timed steps, in ms."""
    ms = sorted(s * 1e3 for s in step_seconds)
    return {
        "median": percentile(ms, 50),
        "p5": percentile(ms, 5),
        "p95": percentile(ms, 95),
        "mean": sum(ms) / len(ms),
    }


def step_times_ms(step_seconds):
    """The JSON's step_times_ms: every timed step's time in ms, in order, rounded to 4 decimals."""
    return [round(s * 1e3, 4) for s in step_seconds]


# ---------------------------------------------------------------------------
# GPU energy over the timed window (NVML)
# ---------------------------------------------------------------------------


def open_energy_counter(on_gpu, pci_bus_id=None, cuda_ordinal=None):
    """(counter, None) or (None, why the energy is not measured). On a GPU, name it by its PCI bus id or its
    CUDA ordinal (nvml_energy.open_counter)."""
    if not on_gpu:
        return None, "not measured on the CPU (NVML reads GPU energy)"
    try:
        import nvml_energy  # beside this file; ctypes on the driver's libnvidia-ml.so.1
    except ImportError as error:  # e.g. a Python without ctypes: energy is not measured
        return None, f"peers/common/nvml_energy.py cannot be imported ({error})"
    return nvml_energy.open_counter(pci_bus_id=pci_bus_id, cuda_ordinal=cuda_ordinal)


def read_energy(counter):
    """Joules since the driver loaded, or None (an error after the first reading counts as unavailable)."""
    if counter is None:
        return None
    try:
        return counter.read_joules()
    except OSError:
        return None


def window_energy(counter, reason, before, after):
    """(joules of the window, reason) from the readings at its two ends, or (None, why there are none);
    reason is open_energy_counter's."""
    if before is not None and after is not None and after >= before:
        return after - before, reason
    if counter is not None:
        reason = "the energy counter could not be read at both ends of the window"
    return None, reason


def start_clock_sampler(counter):
    """Samples the SM clock, power and clock-event reasons of open_energy_counter's GPU every 50 ms until
    stop_clock_sampler; None where NVML cannot (the result's gpu_clocks is then null)."""
    if counter is None:
        return None
    import nvml_energy
    sampler, _ = nvml_energy.start_clock_sampler(counter)
    return sampler


def stop_clock_sampler(sampler):
    """The window's clock summary (nvml_energy.summarize_clock_samples' dict), or None."""
    return None if sampler is None else sampler.stop()


CLOCK_FRACTIONS = ("power_capped_fraction", "thermal_slowdown_fraction", "hardware_slowdown_fraction")


def gpu_clocks_result(mine, slowest_median=None, mean_fractions=None):
    """The result's gpu_clocks, with dlbench's keys, from this rank's summary (rank 0 writes the result); with
    several ranks, the lowest of their median clocks and the ranks' mean fractions. None without a summary."""
    if mine is None:
        return None
    fractions = mean_fractions or {k: mine[k] for k in CLOCK_FRACTIONS}
    return {"sm_clock_median_mhz": mine["sm_clock_median_mhz"] if slowest_median is None else slowest_median,
            "sm_clock_median_mhz_rank0": mine["sm_clock_median_mhz"],
            "sm_clock_min_mhz_rank0": mine["sm_clock_min_mhz"],
            "sm_clock_max_mhz_rank0": mine["sm_clock_max_mhz"],
            "power_mean_watts_rank0": mine["power_mean_watts"],
            **fractions,
            "samples_rank0": mine["samples"],
            "period_ms": 50}


# ---------------------------------------------------------------------------
# System description and the JSON result
# ---------------------------------------------------------------------------


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def utc_date():
    """The JSON's date: now, UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def system_info():
    """The JSON's system: hostname, cpu, cores, python."""
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }


def write_json_atomically(path, obj):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

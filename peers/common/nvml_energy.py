"""A GPU's energy over a time window, from NVML's total-energy counter, and its clocks over the window
(ClockSampler): shared by the peers.

NVML comes with the NVIDIA driver (libnvidia-ml.so.1), not with a framework, so it is opened through ctypes,
as dlbench does with dlopen: no Python package is needed. nvmlDeviceGetTotalEnergyConsumption gives the
millijoules the whole board has used since the driver was loaded (Volta and later); the energy of a window is
the difference of two readings. Anything missing (no library, no GPU, an older GPU, a MIG instance) makes
open_counter return a reason instead of a counter: energy is reported as unavailable, never as a failure.

    counter, reason = nvml_energy.open_counter(pci_bus_id="0000:19:00.0")  # or cuda_ordinal=0
    before = counter.read_joules(); ...; joules = counter.read_joules() - before

Which NVML device: by PCI bus id (the framework's, or CUDA's own for a CUDA device ordinal, asked of
libcuda.so.1), which names the same board whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER say. Only when
neither is known is the ordinal mapped through CUDA_VISIBLE_DEVICES to an NVML index (or a GPU UUID), which
assumes CUDA numbers the boards in PCI order as NVML does.
"""

import ctypes
import os
import statistics
import threading

NVML_SUCCESS = 0
_nvml = None  # (library, None) once nvmlInit_v2 succeeded, or (None, reason)


class EnergyCounter:
    def __init__(self, lib, handle, name):
        self._lib, self._handle, self.name = lib, handle, name

    def read_millijoules(self):
        value = ctypes.c_ulonglong(0)
        rc = self._lib.nvmlDeviceGetTotalEnergyConsumption(self._handle, ctypes.byref(value))
        if rc != NVML_SUCCESS:
            raise OSError(f"nvmlDeviceGetTotalEnergyConsumption: {_error_string(self._lib, rc)}")
        return int(value.value)

    def read_joules(self):
        return self.read_millijoules() / 1e3


# NVML's clock-event (throttle) reason bits, as dlbench's gpu_info.h names them.
POWER_CAP = 0x4
THERMAL = 0x20 | 0x40
HARDWARE = 0x8 | 0x80


def summarize_clock_samples(samples):
    """dlbench's ClockSummary of [(sm_clock_mhz, power_watts, reason_bits), ...] (not empty), as a dict."""
    clocks = [s[0] for s in samples]
    n = len(samples)
    return {
        "samples": n,
        "sm_clock_median_mhz": statistics.median(clocks),
        "sm_clock_min_mhz": min(clocks),
        "sm_clock_max_mhz": max(clocks),
        "power_mean_watts": sum(s[1] for s in samples) / n,
        "power_capped_fraction": sum(1 for s in samples if s[2] & POWER_CAP) / n,
        "thermal_slowdown_fraction": sum(1 for s in samples if s[2] & THERMAL) / n,
        "hardware_slowdown_fraction": sum(1 for s in samples if s[2] & HARDWARE) / n,
    }


class ClockSampler:
    """The GPU's SM clock, power and clock-event reasons every `period` seconds on a thread of its own, as
    dlbench's ClockSampler does over a timed window; stop() gives summarize_clock_samples' dict."""

    def __init__(self, counter, period=0.05):
        self._lib, self._handle, self._period = counter._lib, counter._handle, period
        self._reasons = _clock_reasons(self._lib)  # raises OSError on a driver without the query
        self._samples = [self._read()]  # raises OSError where NVML cannot read the clocks
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self):
        mhz, milliwatts, reasons = ctypes.c_uint(0), ctypes.c_uint(0), ctypes.c_ulonglong(0)
        for rc, what in ((self._lib.nvmlDeviceGetClockInfo(self._handle, 1, ctypes.byref(mhz)), "clock"),
                         (self._lib.nvmlDeviceGetPowerUsage(self._handle, ctypes.byref(milliwatts)), "power"),
                         (self._reasons(self._handle, ctypes.byref(reasons)), "clock reasons")):
            if rc != NVML_SUCCESS:
                raise OSError(f"NVML {what}: {_error_string(self._lib, rc)}")
        return (float(mhz.value), milliwatts.value / 1e3, int(reasons.value))

    def _run(self):
        while not self._stop.wait(self._period):
            try:
                self._samples.append(self._read())
            except OSError:
                pass

    def stop(self):
        self._stop.set()
        self._thread.join()
        try:
            self._samples.append(self._read())
        except OSError:
            pass
        return summarize_clock_samples(self._samples)


def _clock_reasons(lib):
    """NVML's current clock-event reasons query (renamed from ...ThrottleReasons; drivers keep both)."""
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulonglong)]
            return fn
    raise OSError("this driver's NVML has no clock-event reasons query")


def start_clock_sampler(counter, period=0.05):
    """(ClockSampler, None), or (None, why the clocks are not sampled) for an EnergyCounter's GPU."""
    if counter is None:
        return None, "no NVML device"
    try:
        lib = counter._lib
        lib.nvmlDeviceGetClockInfo.restype = ctypes.c_int
        lib.nvmlDeviceGetClockInfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint)]
        lib.nvmlDeviceGetPowerUsage.restype = ctypes.c_int
        lib.nvmlDeviceGetPowerUsage.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint)]
        return ClockSampler(counter, period), None
    except (AttributeError, OSError) as error:
        return None, f"the GPU's clocks cannot be read: {error}"


def _error_string(lib, rc):
    try:
        text = lib.nvmlErrorString(rc)
        return f"{text.decode(errors='replace')} (NVML error {rc})" if text else f"NVML error {rc}"
    except Exception:  # noqa: BLE001 - only the message is at stake
        return f"NVML error {rc}"


def _load_nvml():
    global _nvml
    if _nvml is not None:
        return _nvml
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as error:
        _nvml = (None, f"NVML (libnvidia-ml.so.1, part of the NVIDIA driver) cannot be loaded: {error}")
        return _nvml
    try:
        lib.nvmlInit_v2.restype = ctypes.c_int
        lib.nvmlInit_v2.argtypes = []
        lib.nvmlErrorString.restype = ctypes.c_char_p
        lib.nvmlErrorString.argtypes = [ctypes.c_int]
        lib.nvmlDeviceGetTotalEnergyConsumption.restype = ctypes.c_int
        lib.nvmlDeviceGetTotalEnergyConsumption.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulonglong)]
        lib.nvmlDeviceGetHandleByIndex_v2.restype = ctypes.c_int
        lib.nvmlDeviceGetHandleByIndex_v2.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
        lib.nvmlDeviceGetHandleByPciBusId_v2.restype = ctypes.c_int
        lib.nvmlDeviceGetHandleByPciBusId_v2.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.nvmlDeviceGetHandleByUUID.restype = ctypes.c_int
        lib.nvmlDeviceGetHandleByUUID.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    except AttributeError as error:  # a driver too old for one of these entry points
        _nvml = (None, f"this driver's NVML lacks an entry point: {error}")
        return _nvml
    rc = lib.nvmlInit_v2()
    if rc != NVML_SUCCESS:
        _nvml = (None, f"nvmlInit_v2 failed: {_error_string(lib, rc)}")
    else:
        _nvml = (lib, None)
    return _nvml


def cuda_pci_bus_id(ordinal):
    """The PCI bus id ("0000:19:00.0") of CUDA device `ordinal` as this process sees it, from the CUDA
    driver (libcuda.so.1); None where it cannot say."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        if cuda.cuInit(0) != 0:
            return None
        device = ctypes.c_int(0)
        if cuda.cuDeviceGet(ctypes.byref(device), ctypes.c_int(int(ordinal))) != 0:
            return None
        buffer = ctypes.create_string_buffer(64)
        if cuda.cuDeviceGetPCIBusId(buffer, ctypes.c_int(len(buffer)), device) != 0:
            return None
        return buffer.value.decode() or None
    except (OSError, AttributeError, ValueError):
        return None


def open_counter(pci_bus_id=None, cuda_ordinal=None):
    """(EnergyCounter, None), or (None, why not). Give the device's PCI bus id, or its CUDA ordinal."""
    lib, reason = _load_nvml()
    if lib is None:
        return None, reason
    if pci_bus_id is None and cuda_ordinal is not None:
        pci_bus_id = cuda_pci_bus_id(cuda_ordinal)
    handle = ctypes.c_void_p()
    if pci_bus_id:
        name = f"PCI {pci_bus_id}"
        rc = lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle))
    elif cuda_ordinal is not None:
        # The last resort: CUDA_VISIBLE_DEVICES names NVML indices (or UUIDs) in CUDA's order.
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        entry = visible[cuda_ordinal] if "CUDA_VISIBLE_DEVICES" in os.environ and cuda_ordinal < len(visible) \
            else str(cuda_ordinal)
        if entry.isdigit():
            name = f"NVML index {entry}"
            rc = lib.nvmlDeviceGetHandleByIndex_v2(int(entry), ctypes.byref(handle))
        elif entry.startswith("GPU-"):
            name = entry
            rc = lib.nvmlDeviceGetHandleByUUID(entry.encode(), ctypes.byref(handle))
        else:
            return None, f"CUDA_VISIBLE_DEVICES entry {entry!r} names no whole GPU NVML can find (MIG?)"
    else:
        return None, "no GPU was named to NVML"
    if rc != NVML_SUCCESS:
        return None, f"NVML cannot find the GPU ({name}): {_error_string(lib, rc)}"
    counter = EnergyCounter(lib, handle, name)
    try:
        counter.read_millijoules()
    except OSError as error:  # NVML_ERROR_NOT_SUPPORTED before Volta, on some virtual GPUs and MIG
        return None, f"the GPU's energy counter is not available ({name}): {error}"
    return counter, None

# All-reduce time in PyTorch (its own NCCL), timed like dlbench comm-bench: host time per iteration with a
# synchronize after each, median over --iters; plus back-to-back time per op (CUDA events over the loop).
import os, statistics, sys, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank = dist.get_rank(); torch.cuda.set_device(rank)
dtype = {"f16": torch.float16, "f32": torch.float32}[sys.argv[1] if len(sys.argv) > 1 else "f16"]
if rank == 0: print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), flush=True)
size = 1 << 20
while size <= 256 << 20:
    x = torch.ones(size // torch.tensor([], dtype=dtype).element_size(), dtype=dtype, device="cuda")
    for _ in range(5): dist.all_reduce(x)
    torch.cuda.synchronize(); times = []
    for _ in range(20):
        t = time.perf_counter(); dist.all_reduce(x); torch.cuda.synchronize(); times.append(time.perf_counter() - t)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(20): dist.all_reduce(x)
    b.record(); torch.cuda.synchronize()
    m = statistics.median(times)
    if rank == 0:
        print(f"{size>>20:5d} MiB synced {m*1e6:8.1f} us  busbw {size/m/1e9:7.1f} GB/s | back-to-back {a.elapsed_time(b)/20*1e3:8.1f} us", flush=True)
    size *= 2
dist.destroy_process_group()

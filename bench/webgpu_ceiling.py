"""What a WebGPU adapter does with the simplest kernel, for `optjit bench --backend webgpu` to be
read against: y = 0.5 * x + y over N f32 elements (12 bytes per element) as a grid-stride
WGSL kernel, and copy_buffer_to_buffer of the same bytes, through the wgpu Python package (the
same wgpu-native optjit loads), median of several runs.

    python3 bench/webgpu_ceiling.py [--numel 16777216] [--groups 256]
"""
import argparse
import statistics
import time

import wgpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--numel", type=int, default=1 << 24)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    limit = adapter.limits["max-storage-buffer-binding-size"]
    dev = adapter.request_device_sync(required_limits={"max-storage-buffer-binding-size": limit})
    n = a.numel
    if 4 * n > limit:
        raise SystemExit(f"{4 * n} bytes exceed the adapter's binding limit ({limit})")
    src = f"""
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {{
  for (var i: u32 = wg.x * 256u + l.x; i < {n}u; i += {a.groups * 256}u) {{
    y[i] = x[i] * 0.5 + y[i];
  }}
}}"""
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    bx = dev.create_buffer(size=4 * n, usage=usage)
    by = dev.create_buffer(size=4 * n, usage=usage)
    bz = dev.create_buffer(size=6 * n, usage=usage)
    bw = dev.create_buffer(size=6 * n, usage=usage)
    probe = dev.create_buffer(size=4, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    module = dev.create_shader_module(code=src)
    pipe = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    group = dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": bx}}, {"binding": 1, "resource": {"buffer": by}}])

    def wait():  # a 4-byte read-back after the work: returns when the queue has run it
        e = dev.create_command_encoder()
        e.copy_buffer_to_buffer(by, 0, probe, 0, 4)
        dev.queue.submit([e.finish()])
        probe.map_sync(wgpu.MapMode.READ)
        probe.unmap()

    def kernel():
        e = dev.create_command_encoder()
        p = e.begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, group)
        p.dispatch_workgroups(a.groups)
        p.end()
        dev.queue.submit([e.finish()])
        wait()

    def copy():  # 12 bytes per element moved: 6 read and 6 written
        e = dev.create_command_encoder()
        e.copy_buffer_to_buffer(bz, 0, bw, 0, 6 * n)
        dev.queue.submit([e.finish()])
        wait()

    times = {"kernel": [], "copy": []}
    for _ in range(a.reps):  # alternated, so drift hits both alike
        for name, f in (("kernel", kernel), ("copy", copy)):
            t = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t)
    info = adapter.info
    print(f"adapter      {info['device']} ({info['backend_type']})")
    for name in ("kernel", "copy"):
        s = statistics.median(times[name])
        print(f"{name:12} {1e3 * s:9.3f} ms  {12 * n / s / 1e9:7.2f} GB/s (12 bytes per element)")
    print(f"kernel / copy bandwidth: {statistics.median(times['copy']) / statistics.median(times['kernel']):.3f}")


if __name__ == "__main__":
    main()

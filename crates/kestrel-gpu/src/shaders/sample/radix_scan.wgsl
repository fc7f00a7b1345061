// Radix sort: the scan of the digit-major histogram.
@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    let nt = (p.v[2].w + TILE - 1u) / TILE;
    _ = scan_range(t, 0u, 256u * nt);
}

// Compaction: the tiles' offsets and the pool size.
@group(0) @binding(0) var<storage, read_write> st: array<u32>;
@group(0) @binding(1) var<storage, read_write> buf: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    let nt = (p.v[0].x + TILE - 1u) / TILE;
    let th = plan();
    let above = scan_range(t, 0u, nt);
    let equal = scan_range(t, nt, nt);
    if (t == 0u) {
        st[NPOOL] = above + min(equal, th.y);
    }
}

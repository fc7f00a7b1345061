// Sorts a small pool by rank: (key descending, id ascending).
@group(0) @binding(0) var<storage, read> src: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> st: array<u32>;

// The pool is in id order, so an element's place is the number of larger
// keys plus the number of equal keys before it.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let n = st[NPOOL];
    let i = gid(wg, t);
    if (i >= n) { return; }
    let e = src[i];
    var rank = 0u;
    for (var j = 0u; j < n; j++) {
        let k = src[j].x;
        if (k > e.x || (k == e.x && j < i)) { rank++; }
    }
    dst[rank] = e;
}

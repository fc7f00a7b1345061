// Radix select: the digit at which the top-k count is reached.
@group(0) @binding(0) var<storage, read_write> st: array<u32>;
@group(0) @binding(1) var<uniform> shift_u: vec4<u32>;

// The digit (from the top) at which the count of keys reaches the number
// still wanted; keys above it are all in, and the remainder moves on.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    if (t == 0u) {
        let rem = st[SEL_REM];
        var cum = 0u;
        var digit = 0u;
        var left = rem;
        for (var b = 255i; b >= 0i; b--) {
            let c = st[HIST + u32(b)];
            if (cum + c >= rem) {
                digit = u32(b);
                left = rem - cum;
                break;
            }
            cum += c;
        }
        st[SEL_PREFIX] = st[SEL_PREFIX] | (digit << shift_u.x);
        st[SEL_REM] = left;
    }
    storageBarrier();
    workgroupBarrier();
    st[HIST + t] = 0u;
}

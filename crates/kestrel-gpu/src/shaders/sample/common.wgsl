// The full sampler's state words, parameters and helpers, shared by all its kernels
// (after float_bits.wgsl).
// State words.
const MAXK: u32 = 0u;
const NFIN: u32 = 1u;
const SEL_PREFIX: u32 = 2u;
const SEL_REM: u32 = 3u;
const NPOOL: u32 = 4u;
const ARGMAX: u32 = 5u;
const HIST: u32 = 16u;
const TILE: u32 = 256u;
const GRID_X: u32 = 32768u;

// vocab, pos, window start, window length;
// bias entries, repeat, frequency, presence penalty (bits);
// k, mode (0 all, 1 top-k select, 2 min-p prefilter), greedy, pool bound;
// top_p (bits), ln(min_p) (bits), flags (1 top-p, 2 min-p), 1/temperature (bits);
// 0 (for fence), token mask bound (1) or not (0)
struct Params { v: array<vec4<u32>, 5> }

// The float bits back from a key.
fn unkey(k: u32) -> u32 {
    if ((k & 0x80000000u) != 0u) { return k & 0x7fffffffu; }
    return ~k;
}
// The key with -0 taken as +0, for comparisons that follow float `>=`.
fn cmp_key(b: u32) -> u32 {
    if (b == 0x80000000u) { return key(0u); }
    return key(b);
}

fn gid(wg: vec3<u32>, t: u32) -> u32 {
    return (wg.y * GRID_X + wg.x) * 256u + t;
}

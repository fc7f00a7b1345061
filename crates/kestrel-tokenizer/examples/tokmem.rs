//! Peak heap of `Tokenizer::encode` on pathological prompts.
//!
//! `cargo run --release -p kestrel-tokenizer --example tokmem -- MODEL.gguf...`
//!
//! For each model and each kind of ~2 MB text (one character repeated, a
//! run of mixed ASCII, mixed scripts, digits, emoji joined by ZWJs, short
//! lines, and ordinary English as the reference), prints the token count,
//! the peak heap allocated during `encode(text, true, true)` beyond what was
//! live before it (the returned ids included), that peak per input byte, the
//! ids' own 4 bytes a token per input byte, and the time taken; then the
//! encode throughput on 1 MiB of English.
//!
//! A counting global allocator measures the heap: a `realloc` counts as the
//! new block allocated while the old one is still live, as a copying
//! allocator would have it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use kestrel_gguf::GgufFile;
use kestrel_tokenizer::Tokenizer;

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl Counting {
    fn grow(by: usize) {
        let now = CURRENT.fetch_add(by, Relaxed) + by;
        PEAK.fetch_max(now, Relaxed);
    }
    fn shrink(by: usize) {
        CURRENT.fetch_sub(by, Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees carry over; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract (non-zero size).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Counting::grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Counting::grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        Counting::shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Count the new block while the old one is still live (the peak a
        // copying realloc has), then drop the old one.
        Counting::grow(new_size);
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds
        // `realloc`'s contract for `new_size`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            Counting::shrink(new_size);
        } else {
            Counting::shrink(layout.size());
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// xorshift64*: deterministic texts without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

const TARGET: usize = 2_000_000;

const ENGLISH: &str = "The committee met on Tuesday to review the budget for the coming year. \
After a long discussion, the members agreed that the library's opening hours should be \
extended, and that 12 new computers would be bought before September. \"We can't keep \
turning people away,\" said the chair; others weren't so sure.\nThe vote was 7 to 3.\n\n";

/// Random characters from `pool` until the text reaches `TARGET` bytes.
fn random_text(pool: &[char], rng: &mut Rng) -> String {
    let mut s = String::with_capacity(TARGET + 4);
    while s.len() < TARGET {
        s.push(pool[rng.below(pool.len())]);
    }
    s
}

fn repeat_to(unit: &str, bytes: usize) -> String {
    unit.repeat(bytes.div_ceil(unit.len()))
}

fn kinds() -> Vec<(&'static str, String)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let ascii: Vec<char> = ('a'..='z')
        .chain('A'..='Z')
        .chain('0'..='9')
        .chain("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~".chars())
        .collect();
    let scripts: Vec<char> = ('a'..='z')
        .chain('\u{430}'..='\u{44f}') // Cyrillic
        .chain('\u{4e00}'..='\u{4e7f}') // CJK
        .chain('\u{627}'..='\u{64a}') // Arabic
        .chain('\u{905}'..='\u{939}') // Devanagari
        .collect();
    let digits: Vec<char> = ('0'..='9').collect();
    vec![
        ("one char", "a".repeat(TARGET)),
        ("ascii run", random_text(&ascii, &mut rng)),
        ("mixed scripts", random_text(&scripts, &mut rng)),
        ("digits", random_text(&digits, &mut rng)),
        (
            "emoji zwj",
            repeat_to("👨\u{200d}👩\u{200d}👧\u{200d}👦", TARGET),
        ),
        ("short lines", repeat_to("a\n", TARGET)),
        ("english", repeat_to(ENGLISH, TARGET)),
    ]
}

fn main() {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        eprintln!("usage: tokmem MODEL.gguf...");
        std::process::exit(2);
    }
    let kinds = kinds();
    for path in &paths {
        let f = GgufFile::open(path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
        let tok = Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("tokenizer of {path}: {e}"));
        drop(f);
        let name = path.rsplit('/').next().unwrap_or(path);
        println!("\n{name}");
        println!("| kind | input bytes | tokens | peak extra heap | B / input B | ids B / input B | encode |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for (kind, text) in &kinds {
            let base = CURRENT.load(Relaxed);
            PEAK.store(base, Relaxed);
            let t0 = Instant::now();
            let ids = tok.encode(text, true, true);
            let dt = t0.elapsed();
            let peak = PEAK.load(Relaxed) - base;
            println!(
                "| {kind} | {} | {} | {peak} | {:.1} | {:.1} | {:.0} ms |",
                text.len(),
                ids.len(),
                peak as f64 / text.len() as f64,
                (4 * ids.len()) as f64 / text.len() as f64,
                dt.as_secs_f64() * 1e3
            );
        }
        let english = repeat_to(ENGLISH, 1 << 20);
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t0 = Instant::now();
            let ids = tok.encode(&english, true, true);
            best = best.min(t0.elapsed().as_secs_f64());
            std::hint::black_box(ids);
        }
        println!(
            "throughput, 1 MiB English, best of 5: {:.1} MB/s",
            english.len() as f64 / best / 1e6
        );
    }
}

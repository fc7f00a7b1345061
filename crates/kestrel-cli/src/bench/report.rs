//! The benchmark's results and their three renderings: llama-bench's markdown
//! table (plus bandwidth and RSS lines), and JSON / CSV records that carry the
//! same fields with the raw samples. JSON is an array of one object per test,
//! shaped like llama-bench's `-o json` so scripts can read both alike.
//! Generation through the decode loop, unconstrained and under a JSON
//! schema (`tgN+loop`, `tgN+json`), adds two rows and their ratio.

use super::membw::Bandwidth;
use super::stats::{mean, sample_stddev, tokens_per_second};

/// What the table says about the model.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub filename: String,
    /// llama.cpp's description: architecture, size label, file type.
    pub desc: String,
    /// Bytes of every tensor in the file (llama-bench's `model_size`).
    pub size_bytes: u64,
    /// Elements of every tensor in the file (llama-bench's `model_n_params`).
    pub n_params: u64,
    /// Weight bytes one decode step reads.
    pub decode_bytes: u64,
}

/// One test (`pp512`, `tg128`, `tg128+json`) and its timed repetitions.
#[derive(Clone, Debug)]
pub struct TestResult {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub samples_ns: Vec<u64>,
    pub path: TestPath,
}

/// How a test's tokens were computed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TestPath {
    /// The backend's steps, fed directly (llama-bench's tests).
    Steps,
    /// Generated through the decode loop, as `run` generates.
    Loop,
    /// Through the loop under a JSON schema; the constraint's host time
    /// per token (it overlaps the next forward pass).
    Json { constraint_ms_per_token: f64 },
}

impl TestResult {
    pub fn name(&self) -> String {
        let base = test_name(self.n_prompt, self.n_gen);
        match self.path {
            TestPath::Steps => base,
            TestPath::Loop => format!("{base}+loop"),
            TestPath::Json { .. } => format!("{base}+json"),
        }
    }

    pub fn samples_ts(&self) -> Vec<f64> {
        let n = self.n_prompt + self.n_gen;
        self.samples_ns
            .iter()
            .map(|&ns| tokens_per_second(n, ns))
            .collect()
    }

    pub fn avg_ts(&self) -> f64 {
        mean(&self.samples_ts())
    }

    pub fn stddev_ts(&self) -> f64 {
        sample_stddev(&self.samples_ts())
    }

    fn ns_f64(&self) -> Vec<f64> {
        self.samples_ns.iter().map(|&n| n as f64).collect()
    }

    fn is_decode(&self) -> bool {
        self.n_prompt == 0 && self.n_gen > 0
    }

    fn constraint_ms_per_token(&self) -> Option<f64> {
        match self.path {
            TestPath::Json {
                constraint_ms_per_token,
            } => Some(constraint_ms_per_token),
            _ => None,
        }
    }
}

/// llama-bench's name of a test: `pp512`, `tg128`.
pub fn test_name(n_prompt: usize, n_gen: usize) -> String {
    match (n_prompt, n_gen) {
        (p, 0) => format!("pp{p}"),
        (0, n) => format!("tg{n}"),
        (p, n) => format!("pp{p}+tg{n}"),
    }
}

/// Everything one `kestrel bench` run measured.
#[derive(Clone, Debug)]
pub struct Report {
    pub model: ModelInfo,
    /// llama-bench's backend column: `CPU`, or the GPU API (`Vulkan`, ...).
    pub backend: String,
    pub threads: usize,
    pub tests: Vec<TestResult>,
    pub bandwidth: Option<Bandwidth>,
    pub peak_rss: Option<u64>,
    /// `--bw-paired`'s rounds, one entry per generation test (or none).
    pub paired: Vec<Paired>,
}

/// One generation test's `--bw-paired` rounds: each a probe, one more
/// timed run, and another probe, so that each run's decode traffic meets
/// the bandwidth of the same seconds (on a shared VM the probe moves by
/// half within seconds, and a probe taken after all the tests may meet
/// another minute than the runs did).
#[derive(Clone, Debug)]
pub struct Paired {
    pub n_gen: usize,
    pub rounds: Vec<PairedRound>,
}

#[derive(Clone, Copy, Debug)]
pub struct PairedRound {
    /// The run's decode traffic, 10^9 bytes per second.
    pub decode_gbs: f64,
    /// The probes just before and just after the run.
    pub probe_before: f64,
    pub probe_after: f64,
}

impl PairedRound {
    /// The decode traffic as a percentage of the mean of the two probes.
    pub fn percent(&self) -> f64 {
        200.0 * self.decode_gbs / (self.probe_before + self.probe_after)
    }
}

impl Paired {
    /// Each round's percentage, in increasing order.
    pub fn percents(&self) -> Vec<f64> {
        let mut p: Vec<f64> = self.rounds.iter().map(PairedRound::percent).collect();
        p.sort_by(f64::total_cmp);
        p
    }

    /// The median round's percentage (the mean of the middle two for an
    /// even count).
    pub fn median_percent(&self) -> Option<f64> {
        median(&self.percents())
    }
}

/// The middle value of increasing `v` (the mean of the middle two for an
/// even count).
fn median(v: &[f64]) -> Option<f64> {
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// `lo-hi` of the values, two decimals.
fn span(v: impl Iterator<Item = f64>) -> String {
    let (lo, hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    format!("{lo:.2}-{hi:.2}")
}

/// A value of one output field.
#[derive(Clone, Debug, PartialEq)]
enum Field {
    Str(String),
    Int(u64),
    Float(f64),
    Null,
    Ints(Vec<u64>),
    Floats(Vec<f64>),
}

impl Report {
    /// Achieved decode traffic of a tg test: weight bytes per token x tokens/s.
    pub fn decode_gb_per_s(&self, t: &TestResult) -> Option<f64> {
        t.is_decode()
            .then(|| self.model.decode_bytes as f64 * t.avg_ts() / 1e9)
    }

    /// The decode traffic as a percentage of the measured read bandwidth.
    pub fn decode_bw_percent(&self, t: &TestResult) -> Option<f64> {
        let bw = self.bandwidth.as_ref().filter(|b| b.gb_per_s > 0.0)?;
        Some(100.0 * self.decode_gb_per_s(t)? / bw.gb_per_s)
    }

    /// The paired rounds of test `t`, if it had any.
    fn paired_for(&self, t: &TestResult) -> Option<&Paired> {
        self.paired
            .iter()
            .find(|p| t.is_decode() && t.path == TestPath::Steps && p.n_gen == t.n_gen)
    }

    /// A constrained test's unconstrained twin (the same generation
    /// through the same loop).
    fn loop_twin(&self, t: &TestResult) -> Option<&TestResult> {
        t.constraint_ms_per_token()?;
        self.tests
            .iter()
            .find(|u| u.path == TestPath::Loop && u.n_gen == t.n_gen)
    }

    /// A constrained test's t/s over its twin's.
    pub fn constrained_ratio(&self, t: &TestResult) -> Option<f64> {
        let free = self.loop_twin(t)?;
        (free.avg_ts() > 0.0).then(|| t.avg_ts() / free.avg_ts())
    }

    /// The median over the repetitions of a constrained run's t/s over the
    /// twin's run just before it: each pair meets the same seconds of a
    /// shared machine, which the means' ratio does not.
    pub fn constrained_pair_ratio(&self, t: &TestResult) -> Option<f64> {
        let free = self.loop_twin(t)?;
        let mut r: Vec<f64> = t
            .samples_ts()
            .iter()
            .zip(free.samples_ts())
            .filter(|&(_, f)| f > 0.0)
            .map(|(c, f)| c / f)
            .collect();
        r.sort_by(f64::total_cmp);
        median(&r)
    }

    /// The fields of one test's record, in output order; JSON and CSV both use them.
    fn fields(&self, t: &TestResult) -> Vec<(&'static str, Field)> {
        use Field::*;
        let opt = |v: Option<f64>| v.map_or(Null, Float);
        let paired = self.paired_for(t);
        vec![
            ("model_filename", Str(self.model.filename.clone())),
            ("model_type", Str(self.model.desc.clone())),
            ("model_size", Int(self.model.size_bytes)),
            ("model_n_params", Int(self.model.n_params)),
            ("backends", Str(self.backend.clone())),
            ("n_threads", Int(self.threads as u64)),
            ("n_prompt", Int(t.n_prompt as u64)),
            ("n_gen", Int(t.n_gen as u64)),
            ("test", Str(t.name())),
            ("avg_ns", Int(mean(&t.ns_f64()).round() as u64)),
            ("stddev_ns", Int(sample_stddev(&t.ns_f64()).round() as u64)),
            ("avg_ts", Float(t.avg_ts())),
            ("stddev_ts", Float(t.stddev_ts())),
            ("weight_bytes_per_token", Int(self.model.decode_bytes)),
            ("decode_gbs", opt(self.decode_gb_per_s(t))),
            ("decode_bw_pct", opt(self.decode_bw_percent(t))),
            (
                "mem_bw_gbs",
                opt(self.bandwidth.as_ref().map(|b| b.gb_per_s)),
            ),
            (
                "mem_bw_bytes",
                self.bandwidth.as_ref().map_or(Null, |b| Int(b.bytes)),
            ),
            ("peak_rss_bytes", self.peak_rss.map_or(Null, Int)),
            (
                "decode_bw_paired_pct",
                opt(paired.and_then(Paired::median_percent)),
            ),
            (
                "decode_bw_paired_pcts",
                paired.map_or(Null, |p| Floats(p.percents())),
            ),
            ("constraint_ms_per_token", opt(t.constraint_ms_per_token())),
            ("constrained_ratio", opt(self.constrained_ratio(t))),
            (
                "constrained_pair_ratio",
                opt(self.constrained_pair_ratio(t)),
            ),
            ("samples_ns", Ints(t.samples_ns.clone())),
            ("samples_ts", Floats(t.samples_ts())),
        ]
    }

    pub fn json(&self) -> String {
        let mut out = String::from("[\n");
        for (i, t) in self.tests.iter().enumerate() {
            out.push_str("  {\n");
            let fields = self.fields(t);
            for (j, (name, value)) in fields.iter().enumerate() {
                let sep = if j + 1 < fields.len() { "," } else { "" };
                out.push_str(&format!("    \"{name}\": {}{sep}\n", json_value(value)));
            }
            let sep = if i + 1 < self.tests.len() { "," } else { "" };
            out.push_str(&format!("  }}{sep}\n"));
        }
        out.push_str("]\n");
        out
    }

    pub fn csv(&self) -> String {
        let Some(first) = self.tests.first() else {
            return String::new();
        };
        let header: Vec<&str> = self.fields(first).iter().map(|(n, _)| *n).collect();
        let mut out = header.join(",") + "\n";
        for t in &self.tests {
            let row: Vec<String> = self.fields(t).iter().map(|(_, v)| csv_value(v)).collect();
            out.push_str(&row.join(","));
            out.push('\n');
        }
        out
    }

    pub fn markdown(&self) -> String {
        let header = [
            "model", "size", "params", "backend", "threads", "test", "t/s",
        ];
        // llama-bench right-aligns every column but the text ones.
        let right = [false, true, true, false, true, true, true];
        let rows: Vec<[String; 7]> = self
            .tests
            .iter()
            .map(|t| {
                [
                    self.model.desc.clone(),
                    format_size(self.model.size_bytes),
                    format_params(self.model.n_params),
                    self.backend.clone(),
                    self.threads.to_string(),
                    t.name(),
                    format!("{:.2} ± {:.2}", t.avg_ts(), t.stddev_ts()),
                ]
            })
            .collect();
        let width: Vec<usize> = (0..header.len())
            .map(|c| {
                rows.iter()
                    .map(|r| r[c].chars().count())
                    .chain([header[c].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let mut s = String::from("|");
            for (c, cell) in cells.iter().enumerate() {
                let pad = " ".repeat(width[c] - cell.chars().count());
                if right[c] {
                    s.push_str(&format!(" {pad}{cell} |"));
                } else {
                    s.push_str(&format!(" {cell}{pad} |"));
                }
            }
            s + "\n"
        };
        let mut out = line(&header.map(String::from));
        out.push('|');
        for c in 0..header.len() {
            let dashes = "-".repeat(width[c] - 1);
            out.push_str(&format!(" {dashes}{} |", if right[c] { ':' } else { '-' }));
        }
        out.push('\n');
        for r in &rows {
            out.push_str(&line(r));
        }

        out.push('\n');
        match &self.bandwidth {
            Some(b) => out.push_str(&format!(
                "memory read bandwidth: {:.2} GB/s ({} read by {} threads, best of {})\n",
                b.gb_per_s,
                format_size(b.bytes),
                b.threads,
                b.runs
            )),
            None if self.backend == "CPU" => {
                out.push_str("memory read bandwidth: not measured (--bw-mib 0)\n")
            }
            None => out.push_str(
                "memory read bandwidth: not measured (host memory; the tests ran on the GPU)\n",
            ),
        }
        for t in self.tests.iter() {
            if let Some(ratio) = self.constrained_ratio(t) {
                out.push_str(&format!(
                    "{}: {ratio:.3} of {}+loop's t/s (median of the run pairs: {:.3}); the \
                     constraint: {:.3} ms/token on the host, overlapped with the forward pass\n",
                    t.name(),
                    test_name(t.n_prompt, t.n_gen),
                    self.constrained_pair_ratio(t).unwrap_or(ratio),
                    t.constraint_ms_per_token().unwrap_or(0.0),
                ));
            }
        }
        for t in self
            .tests
            .iter()
            .filter(|t| t.is_decode() && t.path == TestPath::Steps)
        {
            let gbs = self.decode_gb_per_s(t).unwrap_or(0.0);
            out.push_str(&format!(
                "{}: {} of weights per token x {:.2} t/s = {:.2} GB/s",
                t.name(),
                format_size(self.model.decode_bytes),
                t.avg_ts(),
                gbs
            ));
            if let Some(pct) = self.decode_bw_percent(t) {
                out.push_str(&format!(", {pct:.1}% of the measured bandwidth"));
            }
            out.push('\n');
            let Some(p) = self.paired_for(t) else {
                continue;
            };
            let pct = p.percents();
            let Some(median) = median(&pct) else {
                continue;
            };
            out.push_str(&format!(
                "{}: {} paired rounds (probe, run, probe): {median:.1}% of the probes \
                 around each run (median; {:.1}-{:.1}%), decode {} GB/s, probes {} GB/s\n",
                t.name(),
                p.rounds.len(),
                pct[0],
                pct[pct.len() - 1],
                span(p.rounds.iter().map(|r| r.decode_gbs)),
                span(
                    p.rounds
                        .iter()
                        .flat_map(|r| [r.probe_before, r.probe_after])
                ),
            ));
        }
        match self.peak_rss {
            Some(b) => out.push_str(&format!("peak RSS: {}\n", format_size(b))),
            None => out.push_str("peak RSS: unknown\n"),
        }
        out
    }
}

fn json_value(v: &Field) -> String {
    let float = |x: f64| {
        if x.is_finite() {
            format!("{x}")
        } else {
            "null".to_string()
        }
    };
    match v {
        Field::Str(s) => serde_json::to_string(s).unwrap_or_else(|_| "null".into()),
        Field::Int(n) => n.to_string(),
        Field::Float(x) => float(*x),
        Field::Null => "null".into(),
        Field::Ints(xs) => {
            let items: Vec<String> = xs.iter().map(|n| n.to_string()).collect();
            format!("[{}]", items.join(", "))
        }
        Field::Floats(xs) => {
            let items: Vec<String> = xs.iter().map(|&x| float(x)).collect();
            format!("[{}]", items.join(", "))
        }
    }
}

/// Strings and lists are quoted (lists join their items with commas inside
/// the quotes); a missing value is an empty cell.
fn csv_value(v: &Field) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    match v {
        Field::Str(s) => quote(s),
        Field::Int(n) => n.to_string(),
        Field::Float(x) if x.is_finite() => format!("{x}"),
        Field::Float(_) | Field::Null => String::new(),
        Field::Ints(xs) => quote(
            &xs.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        Field::Floats(xs) => quote(
            &xs.iter()
                .map(|x| format!("{x}"))
                .collect::<Vec<_>>()
                .join(","),
        ),
    }
}

/// Bytes as llama-bench prints a model's size: MiB below 1 GiB, GiB above.
pub fn format_size(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    if bytes < GIB {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    }
}

/// A parameter count as llama-bench prints it: millions below 10^9, billions above.
pub fn format_params(n: u64) -> String {
    if n < 1_000_000_000 {
        format!("{:.2} M", n as f64 / 1e6)
    } else {
        format!("{:.2} B", n as f64 / 1e9)
    }
}

/// llama.cpp's name for a `general.file_type` value.
pub fn file_type_name(ftype: u32) -> Option<&'static str> {
    Some(match ftype {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        21 => "Q2_K - Small",
        25 => "IQ4_NL - 4.5 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        32 => "BF16",
        _ => return None,
    })
}

/// The `model` column: architecture, size label and file type, as llama.cpp
/// describes a model. The size label comes from `general.size_label` when the
/// file has one (llama.cpp guesses it from the layer count instead).
pub fn model_desc(
    arch: &str,
    size_label: Option<&str>,
    n_params: u64,
    ftype: Option<u32>,
) -> String {
    let label = match size_label {
        Some(l) if !l.trim().is_empty() => l.trim().to_string(),
        _ if n_params < 1_000_000_000 => format!("{}M", (n_params as f64 / 1e6).round()),
        _ => format!("{:.1}B", n_params as f64 / 1e9),
    };
    let ty = match ftype {
        Some(t) => file_type_name(t).map_or_else(|| format!("ftype {t}"), String::from),
        None => "unknown type".to_string(),
    };
    format!("{arch} {label} {ty}")
}

/// Weight bytes one decode step reads: every tensor, except that the token
/// embedding table is only gathered row by row, so it counts only when it
/// doubles as the output matrix (no `output.weight`).
pub fn decode_weight_bytes<'a>(tensors: impl IntoIterator<Item = (&'a str, u64)> + Clone) -> u64 {
    let tied = !tensors
        .clone()
        .into_iter()
        .any(|(n, _)| n == "output.weight");
    tensors
        .into_iter()
        .filter(|&(n, _)| tied || n != "token_embd.weight")
        .map(|(_, b)| b)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_like_llama_bench() {
        assert_eq!(format_size(96_576_768), "92.10 MiB");
        assert_eq!(format_size(0), "0.00 MiB");
        assert_eq!(format_size((1 << 30) - 1), "1024.00 MiB");
        assert_eq!(format_size(1 << 30), "1.00 GiB");
        assert_eq!(format_size(4_920_734_720), "4.58 GiB");
    }

    #[test]
    fn params_like_llama_bench() {
        assert_eq!(format_params(134_515_008), "134.52 M");
        assert_eq!(format_params(999_999_999), "1000.00 M");
        assert_eq!(format_params(1_000_000_000), "1.00 B");
        assert_eq!(format_params(7_241_732_096), "7.24 B");
    }

    #[test]
    fn model_descriptions() {
        assert_eq!(
            model_desc("llama", Some("135M"), 1, Some(3)),
            "llama 135M Q4_1"
        );
        assert_eq!(
            model_desc("qwen2", None, 494_032_768, Some(15)),
            "qwen2 494M Q4_K - Medium"
        );
        assert_eq!(
            model_desc("phi3", Some(" "), 3_821_079_552, None),
            "phi3 3.8B unknown type"
        );
        assert_eq!(
            model_desc("llama", Some("1B"), 1, Some(99)),
            "llama 1B ftype 99"
        );
    }

    #[test]
    fn decode_bytes_skip_the_untied_embedding() {
        let untied = [
            ("token_embd.weight", 100),
            ("output.weight", 50),
            ("blk.0.ffn_up.weight", 7),
        ];
        assert_eq!(decode_weight_bytes(untied.iter().copied()), 57);
        let tied = [
            ("token_embd.weight", 100),
            ("blk.0.ffn_up.weight", 7),
            ("output_norm.weight", 1),
        ];
        assert_eq!(decode_weight_bytes(tied.iter().copied()), 108);
    }

    fn report() -> Report {
        Report {
            model: ModelInfo {
                filename: "m\"odel.gguf".into(),
                desc: "llama 135M Q4_1".into(),
                size_bytes: 96_576_768,
                n_params: 134_515_008,
                decode_bytes: 1_000_000_000,
            },
            backend: "CPU".into(),
            threads: 2,
            tests: vec![
                TestResult {
                    n_prompt: 512,
                    n_gen: 0,
                    samples_ns: vec![2_000_000_000, 1_000_000_000],
                    path: TestPath::Steps,
                },
                TestResult {
                    n_prompt: 0,
                    n_gen: 128,
                    samples_ns: vec![1_000_000_000],
                    path: TestPath::Steps,
                },
            ],
            bandwidth: Some(Bandwidth {
                bytes: 1 << 30,
                threads: 2,
                runs: 5,
                gb_per_s: 256.0,
            }),
            peak_rss: Some(150 << 20),
            paired: Vec::new(),
        }
    }

    #[test]
    fn decode_traffic() {
        let r = report();
        assert_eq!(r.decode_gb_per_s(&r.tests[0]), None);
        assert_eq!(r.decode_gb_per_s(&r.tests[1]), Some(128.0));
        assert_eq!(r.decode_bw_percent(&r.tests[1]), Some(50.0));
        let mut r = r;
        r.bandwidth = None;
        assert_eq!(r.decode_bw_percent(&r.tests[1]), None);
    }

    #[test]
    fn markdown_table() {
        let md = report().markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines[0].starts_with("| model "), "{md}");
        for col in ["size", "params", "backend", "threads", "test", "t/s"] {
            assert!(lines[0].contains(&format!(" {col} |")), "{col}: {md}");
        }
        assert!(lines[1].starts_with("| ---"), "{md}");
        // pp512 samples: 256 and 512 t/s -> mean 384, sample stddev 181.02.
        assert!(lines[2].contains("| 92.10 MiB | 134.52 M | CPU"), "{md}");
        assert!(lines[2].contains("pp512 | 384.00 ± 181.02 |"), "{md}");
        assert!(lines[3].contains("tg128 |   128.00 ± 0.00 |"), "{md}");
        assert!(md.contains("memory read bandwidth: 256.00 GB/s"), "{md}");
        assert!(
            md.contains("= 128.00 GB/s, 50.0% of the measured bandwidth"),
            "{md}"
        );
        assert!(md.contains("peak RSS: 150.00 MiB"), "{md}");
        // Every table line has the same width in characters.
        let w = lines[0].chars().count();
        assert!(lines[..4].iter().all(|l| l.chars().count() == w), "{md}");
    }

    #[test]
    fn paired_rounds() {
        let round = |decode_gbs, probe_before, probe_after| PairedRound {
            decode_gbs,
            probe_before,
            probe_after,
        };
        let mut r = report();
        r.paired = vec![Paired {
            n_gen: 128,
            rounds: vec![
                round(30.0, 40.0, 20.0), // 100%
                round(20.0, 50.0, 30.0), // 50%
                round(36.0, 40.0, 40.0), // 90%
                round(35.0, 50.0, 50.0), // 70%
            ],
        }];
        let p = &r.paired[0];
        assert_eq!(p.percents(), [50.0, 70.0, 90.0, 100.0]);
        assert_eq!(p.median_percent(), Some(80.0));
        r.paired[0].rounds.pop();
        assert_eq!(r.paired[0].median_percent(), Some(90.0));
        let md = r.markdown();
        assert!(
            md.contains(
                "tg128: 3 paired rounds (probe, run, probe): 90.0% of the probes around \
                 each run (median; 50.0-100.0%), decode 20.00-36.00 GB/s, probes \
                 20.00-50.00 GB/s\n"
            ),
            "{md}"
        );
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert!(v[0]["decode_bw_paired_pct"].is_null(), "pp has no rounds");
        assert_eq!(v[1]["decode_bw_paired_pct"], 90.0);
        assert_eq!(v[1]["decode_bw_paired_pcts"][0], 50.0);
        // A report without rounds prints no paired line.
        assert!(!report().markdown().contains("paired"));
        assert_eq!(
            Paired {
                n_gen: 1,
                rounds: Vec::new()
            }
            .median_percent(),
            None
        );
    }

    #[test]
    fn constrained_rows_and_ratio() {
        let mut r = report();
        let row = |ns, path| TestResult {
            n_prompt: 0,
            n_gen: 128,
            samples_ns: vec![ns],
            path,
        };
        r.tests.push(row(1_000_000_000, TestPath::Loop));
        r.tests.push(row(
            1_250_000_000,
            TestPath::Json {
                constraint_ms_per_token: 0.25,
            },
        ));
        assert_eq!(r.tests[2].name(), "tg128+loop");
        assert_eq!(r.tests[3].name(), "tg128+json");
        assert_eq!(r.constrained_ratio(&r.tests[3]), Some(0.8));
        assert_eq!(r.constrained_ratio(&r.tests[2]), None);
        let md = r.markdown();
        assert!(md.contains("| tg128+json |   102.40 ± 0.00 |"), "{md}");
        assert!(
            md.contains(
                "tg128+json: 0.800 of tg128+loop's t/s (median of the run pairs: 0.800); \
                 the constraint: 0.250 ms/token on the host, overlapped with the forward \
                 pass\n"
            ),
            "{md}"
        );
        // The bandwidth line stays the steps' test's alone.
        assert_eq!(md.matches("of weights per token").count(), 1, "{md}");
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v[3]["constraint_ms_per_token"], 0.25);
        assert_eq!(v[3]["constrained_ratio"], 0.8);
        assert_eq!(v[3]["constrained_pair_ratio"], 0.8);
        assert!(v[2]["constrained_ratio"].is_null());
        // Every table line has the same width in characters.
        let lines: Vec<&str> = md.lines().take(6).collect();
        let w = lines[0].chars().count();
        assert!(lines.iter().all(|l| l.chars().count() == w), "{md}");
    }

    #[test]
    fn json_records() {
        let v: serde_json::Value = serde_json::from_str(&report().json()).unwrap();
        let a = v.as_array().unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0]["model_filename"], "m\"odel.gguf");
        assert_eq!(a[0]["test"], "pp512");
        assert_eq!(a[0]["avg_ns"], 1_500_000_000u64);
        assert_eq!(a[0]["samples_ts"][1], 512.0);
        assert!(a[0]["decode_gbs"].is_null());
        assert_eq!(a[1]["decode_bw_pct"], 50.0);
        assert_eq!(a[1]["stddev_ts"], 0.0);
        assert_eq!(a[1]["peak_rss_bytes"], 150u64 << 20);
    }

    #[test]
    fn csv_rows() {
        let csv = report().csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("model_filename,model_type,model_size,"));
        assert!(lines[0].ends_with(",samples_ns,samples_ts"));
        assert!(
            lines[1].starts_with("\"m\"\"odel.gguf\",\"llama 135M Q4_1\",96576768,"),
            "{csv}"
        );
        assert!(
            lines[1].ends_with(",\"2000000000,1000000000\",\"256,512\""),
            "{csv}"
        );
        // pp has no decode figures: empty cells.
        assert!(lines[1].contains(",,"), "{csv}");
    }
}

//! llama-server's `/infill` on a code model: the fill-in-the-middle prompt
//! laid out as llama-server lays it out.

use serde_json::json;

mod common;
use common::server::*;

/// llama-server's `/infill` on a code model: the FIM prompt laid out as
/// llama-server lays it out (the expected texts are what llama-server's
/// `prompt` showed for these requests, side by side), its answer the same
/// as `/completion` of that text, and a long prefix cut to its budget.
#[test]
fn serve_infill_lays_out_fim_prompts_as_llama_server() {
    let s = start_model(
        model_file("qwen2.5-coder-0.5b-q4_k_m.gguf"),
        "4096",
        &["-np", "1"],
    );
    let port = s.port;
    let cases = [
        (
            json!({"input_prefix": "def fibonacci(n):\n    ", "input_suffix": "\n    return a\n"}),
            "<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>def fibonacci(n):\n    \
             <|fim_suffix|>\n    return a\n<|fim_middle|>",
            20,
        ),
        (
            json!({"input_prefix": "import os\n", "input_suffix": "", "prompt": "def ",
                "input_extra": [{"filename": "util.py", "text": "def helper():\n    return 1\n"},
                    {"text": "x = 2\n"}]}),
            "<|repo_name|>myproject\n<|file_sep|>util.py\ndef helper():\n    return 1\n\
             <|file_sep|>tmp\nx = 2\n<|file_sep|>filename\n<|fim_prefix|>import os\ndef \
             <|fim_suffix|><|fim_middle|>",
            35,
        ),
    ];
    for (mut body, prompt, n) in cases {
        body["n_predict"] = json!(8);
        body["temperature"] = json!(0);
        let r = post(port, "/infill", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["prompt"], prompt, "{v}");
        assert_eq!(v["tokens_evaluated"], n, "{v}");
        let plain = post(
            port,
            "/completion",
            &json!({"prompt": prompt, "n_predict": 8, "temperature": 0}),
        )
        .json();
        assert_eq!(plain["tokens_evaluated"], n, "{plain}");
        assert_eq!(v["content"], plain["content"], "{v}\n{plain}");
    }
    // A prefix past three quarters of llama-server's 2048-token batch keeps
    // its last 1536 tokens; the suffix keeps what is left of a quarter.
    let line = "x = 1\n";
    let count = |text: &str| {
        post(port, "/tokenize", &json!({"content": text})).json()["tokens"]
            .as_array()
            .unwrap()
            .len()
    };
    let per_line = count(&line.repeat(10)) / 10;
    assert_eq!(count(&line.repeat(1000)), 1000 * per_line);
    let around = 2 + count("myproject\n") + count("filename\n");
    let v = post(
        port,
        "/infill",
        &json!({"input_prefix": line.repeat(1000), "input_suffix": line.repeat(1000),
            "n_predict": 1, "temperature": 0}),
    )
    .json();
    assert_eq!(
        v["tokens_evaluated"].as_u64(),
        Some((around + 3 + 1536 + (512 - 2)) as u64),
        "{}",
        v["tokens_evaluated"]
    );
    let shown = v["prompt"].as_str().unwrap();
    // (llama-server's prompt for this request, its 2056 tokens the same.)
    assert!(
        shown.starts_with("<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>\nx = 1\n")
            && shown.ends_with("x = 1\n<|fim_middle|>"),
        "{shown:?}"
    );
}

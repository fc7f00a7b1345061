//! `kestrel devices` lists the GPU adapters (in CI: lavapipe, Mesa's
//! software Vulkan) with their API and kind.

use std::process::Command;

#[test]
fn devices_lists_an_adapter() {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("devices")
        .output()
        .expect("kestrel runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}: {}{}",
        out.status,
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let first = text.lines().next().unwrap_or_default();
    assert!(first.starts_with("0: "), "{text}");
    assert!(
        ["Vulkan", "Metal", "Dx12"]
            .iter()
            .any(|api| first.contains(api)),
        "{text}"
    );
}

/// What the GPU path does not do yet is refused by name, not ignored.
#[test]
fn run_on_the_gpu_refuses_sampling_it_cannot_do_yet() {
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "run scripts/fetch-models.sh");
    for (extra, needle) in [
        (&["--device", "gpu", "--temp", "0.8"][..], "--temp 0"),
        (
            &["-ngl", "99", "--temp", "0", "-r", "x"][..],
            "stop strings",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
            .args(["run", "-m"])
            .arg(&model)
            .args(["-p", "Hi", "-n", "4"])
            .args(extra)
            .output()
            .expect("kestrel runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
}

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

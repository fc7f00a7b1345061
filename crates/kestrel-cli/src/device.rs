//! `--device` and llama.cpp's `-ngl`, shared by the commands that compute.

use kestrel_engine::Device;

/// Where a command computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceArg {
    Cpu,
    Gpu,
    /// The GPU when wgpu finds a hardware adapter, else the CPU.
    Auto,
}

/// The device `--device` and `--n-gpu-layers` choose (any N > 0 means
/// every layer on the GPU; `auto` resolved).
pub fn choose(device: DeviceArg, n_gpu_layers: Option<i64>) -> Device {
    let d = match device {
        DeviceArg::Cpu => Device::Cpu,
        DeviceArg::Gpu => Device::Gpu,
        DeviceArg::Auto => Device::Auto,
    };
    d.resolve(n_gpu_layers)
}

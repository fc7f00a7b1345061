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

/// `--device` and `--n-gpu-layers`, flattened into each command that computes.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct DeviceArgs {
    /// Where to compute: cpu, gpu (wgpu: Vulkan, Metal, DX12; tokens chosen
    /// on the device), or auto (a hardware GPU if there is one).
    #[arg(long = "device", value_enum, default_value = "cpu")]
    pub device: DeviceArg,
    /// llama.cpp's `-ngl`: any value above 0 puts every layer on the GPU.
    #[arg(long = "n-gpu-layers", allow_negative_numbers = true)]
    pub n_gpu_layers: Option<i64>,
}

impl DeviceArgs {
    /// The device chosen, `auto` resolved.
    pub fn device(self) -> Device {
        choose(self.device, self.n_gpu_layers)
    }
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

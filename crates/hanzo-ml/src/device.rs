//! Devices. Only the CPU exists today; `Cuda(ordinal)` and `Metal(ordinal)` are named in
//! `DeviceLocation` so errors and APIs keep their shape when those backends arrive.

use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    Cpu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceLocation {
    Cpu,
    Cuda { gpu_id: usize },
    Metal { gpu_id: usize },
}

impl Device {
    pub fn location(&self) -> DeviceLocation {
        match self {
            Device::Cpu => DeviceLocation::Cpu,
        }
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// A CUDA device. Fails in a build without the `cuda` backend.
    pub fn new_cuda(ordinal: usize) -> Result<Self> {
        Err(Error::DeviceUnavailable(DeviceLocation::Cuda {
            gpu_id: ordinal,
        }))
    }

    /// A Metal device. Fails in a build without the `metal` backend.
    pub fn new_metal(ordinal: usize) -> Result<Self> {
        Err(Error::DeviceUnavailable(DeviceLocation::Metal {
            gpu_id: ordinal,
        }))
    }

    /// CUDA device `ordinal` if this build and machine have one, else the CPU.
    pub fn cuda_if_available(ordinal: usize) -> Self {
        Self::new_cuda(ordinal).unwrap_or(Device::Cpu)
    }

    pub(crate) fn same(&self, other: &Device, op: &'static str) -> Result<()> {
        if self != other {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.location(),
                rhs: other.location(),
            });
        }
        Ok(())
    }
}

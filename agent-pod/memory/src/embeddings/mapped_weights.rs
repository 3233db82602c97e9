//! The model's weights file memory-mapped read-only: tensors are read in place from
//! the mapping, never copied, so every process on a node that maps the same file (bots
//! from one image) shares one copy of the weights in the page cache, and a process
//! holds only the pages it has touched.
//!
//! Mapping a file is `unsafe` because the mapping's contents change if another process
//! writes the file. The model directory is read-only where the agent runs (an image
//! layer under a read-only root filesystem) and is written only by `fetch-model.sh`
//! before any agent starts; the weights are also checked for shape and type when
//! mapped. This module is the only place that maps anything.

use std::{collections::HashMap, fs::File, ops::Range, path::Path};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

/// Why the weights file cannot be mapped, or a tensor not be read from it.
#[derive(Debug, thiserror::Error)]
pub(super) enum WeightsError {
    /// Opening or mapping the file failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The file is not safetensors.
    #[error(transparent)]
    Format(#[from] safetensors::SafeTensorError),
    #[error("no f32 tensor {name}")]
    MissingTensor { name: String },
    #[error("tensor {name} has shape {actual:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        actual: Vec<usize>,
        expected: Vec<usize>,
    },
    /// `PodCastError` is no `std::error::Error` (bytemuck without `std`), so it is
    /// part of the message rather than a source.
    #[error("tensor {name} is not 4-byte aligned in the file: {reason}")]
    Unaligned {
        name: String,
        reason: bytemuck::PodCastError,
    },
}

/// A tensor's place in the mapping and its shape.
struct TensorEntry {
    bytes: Range<usize>,
    shape: Vec<usize>,
}

/// f32 tensors of a safetensors file, mapped read-only.
pub(super) struct MappedWeights {
    map: Mmap,
    tensors: HashMap<String, TensorEntry>,
}

impl MappedWeights {
    /// Maps `path` and indexes its f32 tensors. Other dtypes are refused by name when
    /// asked for ([`MappedWeights::tensor`]).
    pub(super) fn open(path: &Path) -> Result<Self, WeightsError> {
        let file = File::open(path)?;
        let map = map_read_only(&file)?;
        let tensors = {
            let parsed = SafeTensors::deserialize(&map)?;
            let base = map.as_ptr() as usize;
            parsed
                .tensors()
                .into_iter()
                .filter(|(_, view)| view.dtype() == Dtype::F32)
                .map(|(name, view)| {
                    let start = view.data().as_ptr() as usize - base;
                    let entry = TensorEntry {
                        bytes: start..start + view.data().len(),
                        shape: view.shape().to_vec(),
                    };
                    (name, entry)
                })
                .collect()
        };
        Ok(Self { map, tensors })
    }

    /// The f32 tensor `name`, which must have exactly `shape`.
    pub(super) fn tensor(&self, name: &str, shape: &[usize]) -> Result<&[f32], WeightsError> {
        let entry = self
            .tensors
            .get(name)
            .ok_or_else(|| WeightsError::MissingTensor {
                name: name.to_owned(),
            })?;
        if entry.shape != shape {
            return Err(WeightsError::TensorShape {
                name: name.to_owned(),
                actual: entry.shape.clone(),
                expected: shape.to_vec(),
            });
        }
        bytemuck::try_cast_slice(&self.map[entry.bytes.clone()]).map_err(|reason| {
            WeightsError::Unaligned {
                name: name.to_owned(),
                reason,
            }
        })
    }
}

#[allow(unsafe_code)]
fn map_read_only(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: see the module documentation: the weights file is not written while an
    // agent runs, so the mapping is never changed or truncated underneath it.
    unsafe { Mmap::map(file) }
}

#[cfg(not(target_endian = "little"))]
compile_error!("safetensors stores little-endian floats; the weights are read in place");

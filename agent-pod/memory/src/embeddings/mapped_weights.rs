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
    pub(super) fn open(path: &Path) -> Result<Self, String> {
        let file = File::open(path).map_err(|error| error.to_string())?;
        let map = map_read_only(&file)?;
        let tensors = {
            let parsed = SafeTensors::deserialize(&map).map_err(|error| error.to_string())?;
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
    pub(super) fn tensor(&self, name: &str, shape: &[usize]) -> Result<&[f32], String> {
        let entry = self
            .tensors
            .get(name)
            .ok_or_else(|| format!("no f32 tensor {name}"))?;
        if entry.shape != shape {
            return Err(format!(
                "tensor {name} has shape {:?}, expected {shape:?}",
                entry.shape
            ));
        }
        bytemuck::try_cast_slice(&self.map[entry.bytes.clone()])
            .map_err(|error| format!("tensor {name} is not 4-byte aligned in the file: {error}"))
    }
}

#[allow(unsafe_code)]
fn map_read_only(file: &File) -> Result<Mmap, String> {
    // SAFETY: see the module documentation: the weights file is not written while an
    // agent runs, so the mapping is never changed or truncated underneath it.
    unsafe { Mmap::map(file) }.map_err(|error| error.to_string())
}

#[cfg(not(target_endian = "little"))]
compile_error!("safetensors stores little-endian floats; the weights are read in place");

//! Tensor files in and out, on the host: safetensors (F32, F16, BF16, F64 read; F32 written)
//! and PyTorch's `pytorch_model.bin`. What the tensors mean is `checkpoint`'s job.

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use safetensors::{Dtype, SafeTensors};

use crate::io::atomic::write_atomic;
use crate::Error;

/// A tensor on the host, f32, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl HostTensor {
    pub fn transposed(&self) -> HostTensor {
        let (rows, cols) = (self.shape[0], self.shape[1]);
        let mut data = vec![0.0; self.data.len()];
        for r in 0..rows {
            for c in 0..cols {
                data[c * rows + r] = self.data[r * cols + c];
            }
        }
        HostTensor { shape: vec![cols, rows], data }
    }

    pub fn from_tensor<B: Backend, const D: usize>(t: &Tensor<B, D>) -> Result<Self, Error> {
        let data = t.to_data().convert::<f32>();
        let shape = data.shape.to_vec();
        let data = data.into_vec::<f32>().map_err(|e| Error::Input(format!("{e:?}")))?;
        Ok(Self { shape, data })
    }

    pub fn to_tensor<B: Backend, const D: usize>(&self, device: &B::Device) -> Tensor<B, D> {
        Tensor::from_data(TensorData::new(self.data.clone(), self.shape.clone()), device)
    }
}

/// Reads every tensor of a `.safetensors` file as f32 (F32, F16, BF16 and F64 are accepted).
pub fn read_safetensors(path: &Path) -> Result<BTreeMap<String, HostTensor>, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |message: String| Error::Checkpoint { path: path.into(), message };
    let st = SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
    let mut out = BTreeMap::new();
    for (name, view) in st.tensors() {
        let raw = view.data();
        let data: Vec<f32> = match view.dtype() {
            Dtype::F32 => {
                raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
            }
            Dtype::F64 => raw
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f32)
                .collect(),
            Dtype::F16 => {
                raw.chunks_exact(2).map(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect()
            }
            Dtype::BF16 => raw
                .chunks_exact(2)
                .map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16))
                .collect(),
            // Integer buffers (`position_ids`) are not parameters.
            _ => continue,
        };
        out.insert(name, HostTensor { shape: view.shape().to_vec(), data });
    }
    Ok(out)
}

/// Reads every float tensor of a PyTorch `pytorch_model.bin` (zip or legacy pickle format).
#[cfg(feature = "pytorch")]
pub fn read_pytorch_bin(path: &Path) -> Result<BTreeMap<String, HostTensor>, Error> {
    let bad = |message: String| Error::Checkpoint { path: path.into(), message };
    let reader = burn_store::pytorch::PytorchReader::new(path).map_err(|e| bad(e.to_string()))?;
    let mut out = BTreeMap::new();
    for (name, snapshot) in reader.into_tensors() {
        if !snapshot.dtype.is_float() {
            continue;
        }
        let data = snapshot.to_data().map_err(|e| bad(format!("{name}: {e:?}")))?.convert::<f32>();
        let shape = data.shape.to_vec();
        let data = data.into_vec::<f32>().map_err(|e| bad(format!("{name}: {e:?}")))?;
        out.insert(name, HostTensor { shape, data });
    }
    Ok(out)
}

/// Without the `pytorch` feature (the browser build) only safetensors can be read.
#[cfg(not(feature = "pytorch"))]
pub fn read_pytorch_bin(path: &Path) -> Result<BTreeMap<String, HostTensor>, Error> {
    Err(Error::Checkpoint {
        path: path.into(),
        message: "this build reads model.safetensors only (enable the `pytorch` feature)".into(),
    })
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let frac = (h & 0x3ff) as u32;
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, f) => {
            // Subnormal: renormalise.
            let shift = f.leading_zeros() - 21;
            sign | ((113 - shift) << 23) | ((f << shift) & 0x3ff) << 13
        }
        (0x1f, f) => sign | 0x7f80_0000 | (f << 13),
        (e, f) => sign | ((e + 112) << 23) | (f << 13),
    };
    f32::from_bits(bits)
}

/// Writes f32 tensors to a `.safetensors` file (metadata `format: pt`, as transformers expects).
pub fn write_safetensors(path: &Path, named: &[(String, HostTensor)]) -> Result<(), Error> {
    let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = named
        .iter()
        .map(|(n, t)| {
            (n.clone(), t.data.iter().flat_map(|x| x.to_le_bytes()).collect(), t.shape.clone())
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(n, b, s)| {
            safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error::Checkpoint { path: path.into(), message: format!("{n}: {e}") })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let metadata =
        Some(std::collections::HashMap::from([("format".to_string(), "pt".to_string())]));
    let data = safetensors::serialize(views, metadata)
        .map_err(|e| Error::Checkpoint { path: path.into(), message: e.to_string() })?;
    write_atomic(path, &data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_matches_known_values() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert!(f16_to_f32(0x7c00).is_infinite());
    }

    #[test]
    fn transpose_round_trips() {
        let t = HostTensor { shape: vec![2, 3], data: vec![1., 2., 3., 4., 5., 6.] };
        assert_eq!(t.transposed().data, vec![1., 4., 2., 5., 3., 6.]);
        assert_eq!(t.transposed().transposed(), t);
    }
}

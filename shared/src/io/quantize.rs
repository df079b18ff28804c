//! Int8 weights for the browser: per-output-channel (per-row) symmetric quantization.
//!
//! Every 2-D tensor (Linear weights in HF's `[out, in]` layout, embedding tables `[vocab,
//! hidden]`) is stored as `i8` with one f32 scale per row:
//!
//! ```text
//! scale_r = max_c |w[r, c]| / 127          (1 for an all-zero row)
//! q[r, c] = clamp(round(w[r, c] / scale_r), -127, 127)
//! w'[r, c] = q[r, c] * scale_r             so |w - w'| <= scale_r / 2
//! ```
//!
//! One row per output channel keeps a single large weight from flattening every other channel
//! of the matrix. 1-D tensors (biases, LayerNorm) are few and sensitive, so they stay f32. The
//! file is ordinary safetensors: `NAME` (I8, `[rows, cols]`) plus `NAME.int8_scale` (F32,
//! `[rows]`), which any safetensors reader can list.

use std::collections::{BTreeMap, HashMap};

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

use crate::io::tensor_file::HostTensor;
use crate::Error;

/// The weights file of a web bundle.
pub const WEB_WEIGHTS_FILE: &str = "model.int8.safetensors";
/// Suffix of the per-row scale tensor stored beside each int8 matrix.
pub const SCALE_SUFFIX: &str = ".int8_scale";
/// Name of the scheme, as written in the file's metadata and in model cards.
pub const SCHEME: &str = "int8-symmetric-per-row";

/// One matrix in int8 with its per-row scales.
#[derive(Debug, Clone, PartialEq)]
pub struct Int8Matrix {
    pub rows: usize,
    pub cols: usize,
    /// Row-major `[rows, cols]`.
    pub values: Vec<i8>,
    /// `[rows]`: `w ≈ values * scale` row by row.
    pub scales: Vec<f32>,
}

impl Int8Matrix {
    /// Quantizes a 2-D tensor; `name` is only used in errors.
    pub fn quantize(name: &str, t: &HostTensor) -> Result<Self, Error> {
        let [rows, cols] = t.shape[..] else {
            return Err(Error::Input(format!(
                "`{name}`: int8 quantization needs a 2-D tensor, got shape {:?}",
                t.shape
            )));
        };
        if t.data.len() != rows * cols {
            return Err(Error::Input(format!(
                "`{name}`: {} values for shape {:?}",
                t.data.len(),
                t.shape
            )));
        }
        if let Some(i) = t.data.iter().position(|x| !x.is_finite()) {
            return Err(Error::Input(format!(
                "`{name}`: non-finite weight {} at row {}",
                t.data[i],
                i / cols.max(1)
            )));
        }
        let mut values = Vec::with_capacity(rows * cols);
        let mut scales = Vec::with_capacity(rows);
        for row in t.data.chunks_exact(cols.max(1)).take(rows) {
            let max_abs = row.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            // An all-zero row would divide by zero; any scale reproduces it exactly.
            let scale = if max_abs > 0.0 { max_abs / 127.0 } else { 1.0 };
            values.extend(row.iter().map(|&x| (x / scale).round().clamp(-127.0, 127.0) as i8));
            scales.push(scale);
        }
        Ok(Self { rows, cols, values, scales })
    }

    /// Back to f32, `[rows, cols]`.
    pub fn dequantize(&self) -> HostTensor {
        let data = self
            .values
            .chunks_exact(self.cols.max(1))
            .zip(&self.scales)
            .flat_map(|(row, &scale)| row.iter().map(move |&q| q as f32 * scale))
            .collect();
        HostTensor { shape: vec![self.rows, self.cols], data }
    }
}

/// What quantization did to a set of tensors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuantizeStats {
    /// Size of the int8 safetensors file.
    pub bytes: usize,
    /// Size the same tensors take as f32.
    pub f32_bytes: usize,
    /// Largest |w - dequantize(quantize(w))| over every weight.
    pub max_abs_error: f32,
    /// The tensor where that largest error occurs.
    pub max_abs_error_key: String,
    /// How many tensors were stored as int8 (the rest stay f32).
    pub int8_tensors: usize,
}

/// Quantizes every 2-D tensor of `tensors` (HF names and layout) and serialises the result as
/// one safetensors file: the bytes of `model.int8.safetensors`.
pub fn quantize_to_safetensors(
    tensors: &BTreeMap<String, HostTensor>,
) -> Result<(Vec<u8>, QuantizeStats), Error> {
    let mut stats = QuantizeStats::default();
    // (name, dtype, shape, little-endian bytes)
    let mut buffers: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in tensors {
        if name.ends_with(SCALE_SUFFIX) {
            return Err(Error::Input(format!(
                "`{name}`: the suffix {SCALE_SUFFIX} is reserved for int8 scales"
            )));
        }
        stats.f32_bytes += 4 * t.data.len();
        if t.shape.len() == 2 {
            let q = Int8Matrix::quantize(name, t)?;
            let back = q.dequantize();
            let err = t.data.iter().zip(&back.data).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            if stats.max_abs_error_key.is_empty() || err > stats.max_abs_error {
                stats.max_abs_error = err;
                stats.max_abs_error_key = name.clone();
            }
            stats.int8_tensors += 1;
            let bytes = q.values.iter().map(|&v| v as u8).collect();
            buffers.push((name.clone(), Dtype::I8, t.shape.clone(), bytes));
            buffers.push((
                format!("{name}{SCALE_SUFFIX}"),
                Dtype::F32,
                vec![q.rows],
                f32_bytes(&q.scales),
            ));
        } else {
            buffers.push((name.clone(), Dtype::F32, t.shape.clone(), f32_bytes(&t.data)));
        }
    }
    let views = buffers
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::Input(format!("`{name}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let metadata = HashMap::from([
        ("format".to_string(), "pt".to_string()),
        ("quantization".to_string(), SCHEME.to_string()),
    ]);
    let bytes =
        safetensors::serialize(views, Some(metadata)).map_err(|e| Error::Input(e.to_string()))?;
    stats.bytes = bytes.len();
    Ok((bytes, stats))
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Reads a `model.int8.safetensors` (or a plain F32/F16/BF16 safetensors file) back into f32
/// tensors in HF layout, ready for [`crate::io::checkpoint::load_from_tensors`]. `origin` names the
/// file in errors. Integer tensors other than int8 matrices (`position_ids`) are skipped.
pub fn dequantize_safetensors(
    bytes: &[u8],
    origin: &str,
) -> Result<BTreeMap<String, HostTensor>, Error> {
    let bad = |message: String| Error::Checkpoint { path: origin.into(), message };
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(e.to_string()))?;
    let views: BTreeMap<String, TensorView<'_>> = st.tensors().into_iter().collect();
    let mut out = BTreeMap::new();
    for (name, view) in &views {
        if let Some(matrix) = name.strip_suffix(SCALE_SUFFIX) {
            if views.get(matrix).is_none_or(|m| m.dtype() != Dtype::I8) {
                return Err(bad(format!("`{name}`: scale without an int8 tensor `{matrix}`")));
            }
            continue;
        }
        let tensor = match view.dtype() {
            Dtype::I8 => {
                let [rows, cols] = view.shape()[..] else {
                    return Err(bad(format!(
                        "`{name}`: int8 tensor of shape {:?}, expected 2-D",
                        view.shape()
                    )));
                };
                let scale_key = format!("{name}{SCALE_SUFFIX}");
                let scale = views
                    .get(&scale_key)
                    .ok_or_else(|| bad(format!("`{name}`: int8 tensor without `{scale_key}`")))?;
                if scale.dtype() != Dtype::F32 || scale.shape() != [rows] {
                    return Err(bad(format!(
                        "`{scale_key}`: {:?} {:?}, expected F32 [{rows}] \
                         (one scale per row of `{name}`)",
                        scale.dtype(),
                        scale.shape()
                    )));
                }
                let scales = decode_floats(scale)
                    .ok_or_else(|| bad(format!("`{scale_key}`: unreadable")))?;
                if let Some(s) = scales.iter().find(|s| !s.is_finite() || **s < 0.0) {
                    return Err(bad(format!("`{scale_key}`: invalid scale {s}")));
                }
                let values = view.data().iter().map(|&b| b as i8).collect();
                Int8Matrix { rows, cols, values, scales }.dequantize()
            }
            _ => match decode_floats(view) {
                Some(data) => HostTensor { shape: view.shape().to_vec(), data },
                // Integer buffers (`position_ids`) are not parameters.
                None if is_integer(view.dtype()) => continue,
                None => return Err(bad(format!("`{name}`: unsupported dtype {:?}", view.dtype()))),
            },
        };
        out.insert(name.clone(), tensor);
    }
    Ok(out)
}

/// The values of an F32, F64, F16 or BF16 tensor as f32; `None` for other dtypes.
fn decode_floats(view: &TensorView<'_>) -> Option<Vec<f32>> {
    let raw = view.data();
    Some(match view.dtype() {
        Dtype::F32 => {
            raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
        }
        Dtype::F64 => raw
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32)
            .collect(),
        Dtype::F16 => {
            raw.chunks_exact(2).map(|b| half_to_f32(u16::from_le_bytes([b[0], b[1]]))).collect()
        }
        Dtype::BF16 => raw
            .chunks_exact(2)
            .map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16))
            .collect(),
        _ => return None,
    })
}

fn is_integer(dtype: Dtype) -> bool {
    matches!(
        dtype,
        Dtype::BOOL
            | Dtype::U8
            | Dtype::I16
            | Dtype::U16
            | Dtype::I32
            | Dtype::U32
            | Dtype::I64
            | Dtype::U64
    )
}

/// IEEE half precision to f32, by value: `(-1)^s * 2^(e-15) * 1.f`, or `2^-14 * 0.f` when e = 0.
fn half_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = ((h >> 10) & 0x1f) as i32;
    let fraction = (h & 0x3ff) as f32;
    match exponent {
        0 => sign * fraction * 2f32.powi(-24),
        31 if fraction == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1024.0 + fraction) * 2f32.powi(e - 25),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensors() -> BTreeMap<String, HostTensor> {
        // A matrix with one large weight in row 0, an all-zero row 1 and an ordinary row 2.
        let matrix = HostTensor {
            shape: vec![3, 4],
            data: vec![0.01, -0.02, 3.0, 0.5, 0.0, 0.0, 0.0, 0.0, -0.3, 0.1, 0.07, -0.011],
        };
        let bias = HostTensor { shape: vec![3], data: vec![0.1, -0.2, 0.3] };
        BTreeMap::from([("dense.weight".to_string(), matrix), ("dense.bias".to_string(), bias)])
    }

    #[test]
    fn round_trip_error_is_at_most_half_a_step_per_element() {
        let mut pseudo = 1u32;
        let data: Vec<f32> = (0..64 * 48)
            .map(|_| {
                pseudo = pseudo.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (pseudo >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect();
        let t = HostTensor { shape: vec![64, 48], data };
        let q = Int8Matrix::quantize("w", &t).unwrap();
        let back = q.dequantize();
        let mut worst = 0.0f32;
        for (r, (row, back_row)) in t.data.chunks(48).zip(back.data.chunks(48)).enumerate() {
            let half_step = q.scales[r] / 2.0;
            let max_abs = row.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            for (a, b) in row.iter().zip(back_row) {
                let err = (a - b).abs();
                // f32 rounding of w / scale and q * scale adds at most a few ulps of max |w|.
                assert!(
                    err <= half_step + 1e-6 * max_abs,
                    "row {r}: error {err} > scale/2 = {half_step}"
                );
                worst = worst.max(err / half_step);
            }
            assert!((q.scales[r] - max_abs / 127.0).abs() <= 1e-9);
        }
        println!("worst error / (scale/2) = {worst:.4}");
    }

    #[test]
    fn zero_rows_stay_zero_and_the_large_weight_is_exact() {
        let t = &tensors()["dense.weight"];
        let q = Int8Matrix::quantize("dense.weight", t).unwrap();
        assert_eq!(q.scales[1], 1.0);
        assert!(q.values[4..8].iter().all(|&v| v == 0));
        let back = q.dequantize();
        assert_eq!(&back.data[4..8], &[0.0; 4]);
        assert_eq!(q.values[2], 127);
        assert!((back.data[2] - 3.0).abs() < 1e-6);
    }

    #[test]
    fn file_holds_i8_matrices_f32_scales_and_f32_vectors() {
        let (bytes, stats) = quantize_to_safetensors(&tensors()).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("dense.weight").unwrap().dtype(), Dtype::I8);
        assert_eq!(st.tensor("dense.weight").unwrap().shape(), [3, 4]);
        assert_eq!(st.tensor("dense.weight.int8_scale").unwrap().dtype(), Dtype::F32);
        assert_eq!(st.tensor("dense.weight.int8_scale").unwrap().shape(), [3]);
        assert_eq!(st.tensor("dense.bias").unwrap().dtype(), Dtype::F32);
        assert_eq!(stats.bytes, bytes.len());
        assert_eq!(stats.int8_tensors, 1);
        assert_eq!(stats.f32_bytes, 4 * 15);

        let back = dequantize_safetensors(&bytes, "mem").unwrap();
        assert_eq!(back.keys().collect::<Vec<_>>(), ["dense.bias", "dense.weight"]);
        assert_eq!(back["dense.bias"], tensors()["dense.bias"]);
        let original = &tensors()["dense.weight"];
        let err = original
            .data
            .iter()
            .zip(&back["dense.weight"].data)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert_eq!(err, stats.max_abs_error);
        assert!(err <= 3.0 / 127.0 / 2.0 + 1e-7, "{err}");
    }

    #[test]
    fn plain_float_files_are_read_too() {
        let halves: Vec<u8> =
            [0x3c00u16, 0xc000, 0x0001, 0x7bff].iter().flat_map(|h| h.to_le_bytes()).collect();
        let floats = f32_bytes(&[1.5, -2.0]);
        let ids: Vec<u8> = [0i64, 1].iter().flat_map(|x| x.to_le_bytes()).collect();
        let views = vec![
            ("h", TensorView::new(Dtype::F16, vec![2, 2], &halves).unwrap()),
            ("f", TensorView::new(Dtype::F32, vec![2], &floats).unwrap()),
            ("position_ids", TensorView::new(Dtype::I64, vec![1, 2], &ids).unwrap()),
        ];
        let bytes = safetensors::serialize(views, None).unwrap();
        let back = dequantize_safetensors(&bytes, "mem").unwrap();
        assert_eq!(back["h"].data, vec![1.0, -2.0, 2f32.powi(-24), 65504.0]);
        assert_eq!(back["f"].data, vec![1.5, -2.0]);
        assert!(!back.contains_key("position_ids"));
    }

    #[test]
    fn errors_name_the_offending_key() {
        // An int8 matrix whose scale is missing.
        let values = [1u8, 2, 3, 4];
        let views = vec![("encoder.w", TensorView::new(Dtype::I8, vec![2, 2], &values).unwrap())];
        let bytes = safetensors::serialize(views, None).unwrap();
        let err = dequantize_safetensors(&bytes, "bundle/model.int8.safetensors")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("encoder.w") && err.contains("bundle/model.int8.safetensors"),
            "{err}"
        );

        // A scale of the wrong length.
        let scale = f32_bytes(&[1.0, 2.0, 3.0]);
        let views = vec![
            ("encoder.w", TensorView::new(Dtype::I8, vec![2, 2], &values).unwrap()),
            ("encoder.w.int8_scale", TensorView::new(Dtype::F32, vec![3], &scale).unwrap()),
        ];
        let bytes = safetensors::serialize(views, None).unwrap();
        let err = dequantize_safetensors(&bytes, "mem").unwrap_err().to_string();
        assert!(err.contains("encoder.w.int8_scale"), "{err}");

        // A non-finite weight refuses to quantize.
        let mut t = tensors();
        t.get_mut("dense.weight").unwrap().data[5] = f32::NAN;
        let err = quantize_to_safetensors(&t).unwrap_err().to_string();
        assert!(err.contains("dense.weight") && err.contains("row 1"), "{err}");

        // Garbage is a checkpoint error naming the origin.
        let err = dequantize_safetensors(b"not a file", "x.safetensors").unwrap_err().to_string();
        assert!(err.contains("x.safetensors"), "{err}");
    }
}

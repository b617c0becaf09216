//! `tra einsum` computes and writes in its operands' element type, as `tra
//! run` does: float32 files give a float32 result equal to numpy's, float64
//! files a float64 one, and float32 with float64 float64 (numpy's promotion).

use ndarray::{ArrayD, Ix2, IxDyn};
use serde_json::Value;
use std::path::{Path, PathBuf};
use tra_api::einsum::{einsum_command, EinsumArgs};
use tra_executor::npy;
use tra_executor::threads::{Dtype, Elem};

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("tra-einsum-dtype-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn s(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Small integers, so that float32 and float64 products are exact.
fn array<T: Elem>(shape: &[usize], seed: usize) -> ArrayD<T> {
    let mut i = seed;
    ArrayD::from_shape_fn(IxDyn(shape), |_| {
        i = (i * 7 + 3) % 11;
        T::from_f64(i as f64 - 5.0)
    })
}

fn write<T: Elem>(dir: &Dir, name: &str, a: &ArrayD<T>) -> String {
    let p = dir.s(name);
    npy::write_array::<T>(Path::new(&p), a.shape(), a.as_standard_layout().as_slice().unwrap()).unwrap();
    p
}

fn args(expr: &str, inputs: Vec<String>, output: Option<String>, executor: &str) -> EinsumArgs {
    EinsumArgs {
        expression: expr.into(),
        inputs,
        output,
        block: 2,
        sites: 3,
        executor: executor.into(),
        show_program: false,
        strict: true,
        bounds: Default::default(),
    }
}

fn file_dtype(path: &str) -> Dtype {
    npy::read_file_header(Path::new(path)).unwrap().dtype.float.unwrap()
}

fn matmul<T: Elem + ndarray::LinalgScalar>(a: &ArrayD<T>, b: &ArrayD<T>) -> ArrayD<T> {
    let (a, b) = (a.clone().into_dimensionality::<Ix2>().unwrap(), b.clone().into_dimensionality::<Ix2>().unwrap());
    a.dot(&b).into_dyn()
}

#[test]
fn float32_operands_give_a_float32_result_equal_to_numpy() {
    let dir = Dir::new("f32");
    // 5×7 · 7×3 with block 2: padded last blocks, cropped back.
    let (a, b) = (array::<f32>(&[5, 7], 1), array::<f32>(&[7, 3], 2));
    let (pa, pb) = (write(&dir, "a.npy", &a), write(&dir, "b.npy", &b));
    let want = matmul(&a, &b);
    for executor in ["threads", "reference"] {
        let out = dir.s(&format!("c-{executor}.npy"));
        let summary: Value = serde_json::from_str(
            &einsum_command(args(
                "ij,jk->ik",
                vec![format!("A={pa}"), format!("B={pb}")],
                Some(format!("C={out}")),
                executor,
            ))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(summary["dtype"], "f32", "{executor}");
        assert_eq!(summary["output"]["dtype"], "f32", "{executor}");
        assert_eq!(file_dtype(&out), Dtype::F32, "{executor}");
        assert_eq!(npy::read_array::<f32>(Path::new(&out)).unwrap(), want, "{executor}");
    }
    // Without an output file, the values are in the summary.
    let summary: Value =
        serde_json::from_str(&einsum_command(args("ij->j", vec![format!("A={pa}")], None, "threads")).unwrap())
            .unwrap();
    let want: Vec<f64> = a.sum_axis(ndarray::Axis(0)).iter().map(|&x| x as f64).collect();
    let got: Vec<f64> = summary["output"]["data"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert_eq!(got, want);
}

#[test]
fn float64_operands_stay_float64() {
    let dir = Dir::new("f64");
    let (a, b) = (array::<f64>(&[5, 7], 1), array::<f64>(&[7, 3], 2));
    let (pa, pb) = (write(&dir, "a.npy", &a), write(&dir, "b.npy", &b));
    for executor in ["threads", "reference"] {
        let out = dir.s(&format!("c-{executor}.npy"));
        let summary: Value = serde_json::from_str(
            &einsum_command(args(
                "ij,jk->ik",
                vec![format!("A={pa}"), format!("B={pb}")],
                Some(format!("C={out}")),
                executor,
            ))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(summary["dtype"], "f64", "{executor}");
        assert_eq!(file_dtype(&out), Dtype::F64, "{executor}");
        assert_eq!(npy::read_array::<f64>(Path::new(&out)).unwrap(), matmul(&a, &b), "{executor}");
    }
}

#[test]
fn float32_with_float64_computes_in_float64() {
    let dir = Dir::new("mixed");
    let (a, b) = (array::<f32>(&[4, 6], 3), array::<f64>(&[6, 5], 4));
    let (pa, pb) = (write(&dir, "a.npy", &a), write(&dir, "b.npy", &b));
    let out = dir.s("c.npy");
    einsum_command(args("ij,jk->ik", vec![format!("A={pa}"), format!("B={pb}")], Some(format!("C={out}")), "threads"))
        .unwrap();
    assert_eq!(file_dtype(&out), Dtype::F64);
    assert_eq!(npy::read_array::<f64>(Path::new(&out)).unwrap(), matmul(&a.mapv(f64::from), &b));
}

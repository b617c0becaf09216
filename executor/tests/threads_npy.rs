//! `.npy` files: headers, both byte orders, C and Fortran order, f32 and f64,
//! the relation and dense layouts of a tensor relation, holes, and the
//! errors a user sees (missing file, wrong shape, wrong dtype, not a .npy).

mod common;

use common::TempDir;
use std::path::PathBuf;
use tra_executor::npy::{self, Layout};
use tra_executor::reference::{random_relation, Relation};
use tra_executor::threads::{Pool, TRelation};

/// A hand-written .npy file (version 1.0) with any header dict and raw data.
fn raw_npy(path: &PathBuf, dict: &str, data: &[u8]) {
    let mut h = dict.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    std::fs::write(path, out).unwrap();
}

#[test]
fn arrays_round_trip() {
    let dir = TempDir::new("npy-arrays-round-trip");
    for shape in [vec![], vec![5], vec![3, 4], vec![2, 3, 4], vec![0, 3]] {
        let n: usize = shape.iter().product();
        let data: Vec<f64> = (0..n).map(|i| i as f64 * 0.5 - 3.0).collect();
        let p = dir.join("a.npy");
        npy::write_array(&p, &shape, &data).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!((bytes.len() - n * 8) % 64, 0, "header padded to 64 bytes");
        let a = npy::read_array::<f64>(&p).unwrap();
        assert_eq!(a.shape(), shape.as_slice());
        assert_eq!(a.as_slice().unwrap(), data.as_slice());
        // Read as f32: converted.
        let b = npy::read_array::<f32>(&p).unwrap();
        assert_eq!(b.iter().map(|&x| x as f64).collect::<Vec<_>>(), data);
    }
}

#[test]
fn big_endian_and_fortran_order() {
    let dir = TempDir::new("npy-big-endian-and-fortran-order");
    let p = dir.join("be.npy");
    let vals = [1.5f32, -2.0, 3.25, 4.0, 5.5, -6.0];
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_be_bytes()).collect();
    raw_npy(&p, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", &data);
    let a = npy::read_array::<f64>(&p).unwrap();
    assert_eq!(a.as_slice().unwrap(), &[1.5, -2.0, 3.25, 4.0, 5.5, -6.0]);
    // Column-major: the same values stored by columns.
    let cols = [1.5f64, 4.0, -2.0, 5.5, 3.25, -6.0];
    let data: Vec<u8> = cols.iter().flat_map(|v| v.to_le_bytes()).collect();
    raw_npy(&p, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", &data);
    let a = npy::read_array::<f64>(&p).unwrap();
    assert_eq!(a.as_slice().unwrap(), &[1.5, -2.0, 3.25, 4.0, 5.5, -6.0]);
    // ...and as a relation (Fortran files are read whole, then cut).
    let pool = Pool::<f64>::new();
    let (rel, layout, _) = npy::read_relation(&p, &[2], &[3], &pool).unwrap();
    assert_eq!(layout, Layout::Relation);
    assert_eq!(rel.tuples[1].1.as_slice(), &[4.0, 5.5, -6.0]);
}

fn same(a: &TRelation<f64>, b: &Relation) {
    assert_eq!(a.to_relation(), *b);
}

#[test]
fn relations_in_both_layouts() {
    let dir = TempDir::new("npy-relations-in-both-layouts");
    let pool = Pool::<f64>::new();
    for (kb, ab) in
        [(vec![3u32, 2], vec![4usize, 5]), (vec![2, 3, 2], vec![2, 1, 3]), (vec![4], vec![3]), (vec![2, 2], vec![3])]
    {
        let rel = random_relation(&kb, &ab, 4);
        let t = TRelation::from_relation(&rel, &pool);
        for layout in [Layout::Relation, Layout::Dense] {
            let p = dir.join("r.npy");
            let shape = npy::layout_shape(layout, &kb, &ab);
            match npy::write_relation(&p, &t, &kb, &ab, layout) {
                Ok(holes) => assert_eq!(holes, 0),
                Err(e) => {
                    assert!(shape.is_none() && e.to_string().contains("cannot be written dense"), "{e}");
                    continue;
                }
            }
            let h = npy::read_file_header(&p).unwrap();
            assert_eq!(Some(h.shape.clone()), shape);
            let (back, found, dtype) = npy::read_relation::<f64>(&p, &kb, &ab, &pool).unwrap();
            assert_eq!(found, layout);
            assert_eq!(dtype.name(), "f64");
            same(&back, &rel);
            if layout == Layout::Dense {
                // The dense file is the tensor the reference builds.
                let dense = npy::read_array::<f64>(&p).unwrap();
                assert_eq!(dense, rel.to_dense().unwrap());
            }
            // f32 reading converts.
            let (b32, _, _) = npy::read_relation::<f32>(&p, &kb, &ab, &Pool::new()).unwrap();
            assert_eq!(b32.to_relation(), rel);
        }
    }
}

#[test]
fn holes_are_written_as_zeros() {
    let dir = TempDir::new("npy-holes-are-written-as-zeros");
    let pool = Pool::<f64>::new();
    let rel = random_relation(&[3, 3], &[2, 2], 1);
    let kept: Vec<_> = rel.tuples.iter().filter(|(k, _)| k[0] == k[1]).map(|(k, b)| (k.clone(), b.clone())).collect();
    let diag = Relation::from_tuples(kept).unwrap();
    let t = TRelation::from_relation(&diag, &pool);
    let p = dir.join("holes.npy");
    assert_eq!(npy::write_relation(&p, &t, &[3, 3], &[2, 2], Layout::Dense).unwrap(), 6);
    let dense = npy::read_array::<f64>(&p).unwrap();
    assert_eq!(dense.shape(), &[6, 6]);
    assert_eq!(dense[[0, 2]], 0.0);
    assert_eq!(dense[[2, 2]], rel.tuples[&vec![1, 1]][[0, 0]]);
}

#[test]
fn errors_name_the_file_and_the_problem() {
    let dir = TempDir::new("npy-errors-name-the-file-and-the-problem");
    let pool = Pool::<f64>::new();
    let missing = dir.join("does-not-exist.npy");
    let e = npy::read_relation::<f64>(&missing, &[2], &[2], &pool).unwrap_err().to_string();
    assert!(e.contains("does-not-exist.npy") && e.contains("cannot open"), "{e}");

    let p = dir.join("shape.npy");
    npy::write_array(&p, &[4, 5], &[0.0f64; 20]).unwrap();
    let e = npy::read_relation::<f64>(&p, &[2, 2], &[2, 2], &pool).unwrap_err().to_string();
    assert!(e.contains("has shape [4, 5]") && e.contains("[2, 2, 2, 2]") && e.contains("[4, 4]"), "{e}");

    let p = dir.join("int.npy");
    raw_npy(&p, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", &[0u8; 16]);
    let e = npy::read_relation::<f64>(&p, &[2], &[1], &pool).unwrap_err().to_string();
    assert!(e.contains("int64") && e.contains("float32 or float64"), "{e}");

    let p = dir.join("text.npy");
    std::fs::write(&p, "x,y\n1,2\n").unwrap();
    let e = npy::read_file_header(&p).unwrap_err().to_string();
    assert!(e.contains("not a .npy file"), "{e}");

    let p = dir.join("short.npy");
    raw_npy(&p, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", &[0u8; 16]);
    let e = npy::read_array::<f64>(&p).unwrap_err().to_string();
    assert!(e.contains("shorter than the header"), "{e}");
}

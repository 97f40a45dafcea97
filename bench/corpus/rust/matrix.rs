//! Dense row-major matrices of `f64` with the operations a small numerics
//! module usually needs: arithmetic, transpose, LU-based solve and determinant.

use std::fmt;
use std::ops::{Add, Index, IndexMut, Mul, Sub};

#[derive(Debug, Clone, PartialEq)]
pub enum MatrixError {
    DimensionMismatch { expected: (usize, usize), found: (usize, usize) },
    NotSquare(usize, usize),
    Singular,
    Empty,
}

impl fmt::Display for MatrixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatrixError::DimensionMismatch { expected, found } => write!(
                f,
                "dimension mismatch: expected {}x{}, found {}x{}",
                expected.0, expected.1, found.0, found.1
            ),
            MatrixError::NotSquare(r, c) => write!(f, "matrix is {}x{}, not square", r, c),
            MatrixError::Singular => write!(f, "matrix is singular"),
            MatrixError::Empty => write!(f, "matrix has no elements"),
        }
    }
}

impl std::error::Error for MatrixError {}

const EPSILON: f64 = 1e-12;

#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f64>,
}

impl Matrix {
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Matrix { rows, cols, data: vec![0.0; rows * cols] }
    }

    pub fn identity(n: usize) -> Self {
        let mut m = Matrix::zeros(n, n);
        for i in 0..n {
            m[(i, i)] = 1.0;
        }
        m
    }

    /// Build a matrix from nested rows; every row must have the same length.
    pub fn from_rows(rows: &[Vec<f64>]) -> Result<Self, MatrixError> {
        let first = rows.first().ok_or(MatrixError::Empty)?;
        let cols = first.len();
        if cols == 0 {
            return Err(MatrixError::Empty);
        }
        let mut data = Vec::with_capacity(rows.len() * cols);
        for row in rows {
            if row.len() != cols {
                return Err(MatrixError::DimensionMismatch {
                    expected: (rows.len(), cols),
                    found: (rows.len(), row.len()),
                });
            }
            data.extend_from_slice(row);
        }
        Ok(Matrix { rows: rows.len(), cols, data })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn row(&self, r: usize) -> &[f64] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    pub fn transpose(&self) -> Matrix {
        let mut out = Matrix::zeros(self.cols, self.rows);
        for r in 0..self.rows {
            for c in 0..self.cols {
                out[(c, r)] = self[(r, c)];
            }
        }
        out
    }

    pub fn try_mul(&self, other: &Matrix) -> Result<Matrix, MatrixError> {
        if self.cols != other.rows {
            return Err(MatrixError::DimensionMismatch {
                expected: (self.cols, other.cols),
                found: (other.rows, other.cols),
            });
        }
        let mut out = Matrix::zeros(self.rows, other.cols);
        for r in 0..self.rows {
            for k in 0..self.cols {
                let a = self[(r, k)];
                if a == 0.0 {
                    continue;
                }
                for c in 0..other.cols {
                    out[(r, c)] += a * other[(k, c)];
                }
            }
        }
        Ok(out)
    }

    pub fn scale(&self, factor: f64) -> Matrix {
        Matrix { rows: self.rows, cols: self.cols, data: self.data.iter().map(|x| x * factor).collect() }
    }

    /// LU decomposition with partial pivoting. Returns the combined LU matrix,
    /// the row permutation and the permutation's sign.
    fn lu(&self) -> Result<(Matrix, Vec<usize>, f64), MatrixError> {
        if self.rows != self.cols {
            return Err(MatrixError::NotSquare(self.rows, self.cols));
        }
        let n = self.rows;
        let mut lu = self.clone();
        let mut perm: Vec<usize> = (0..n).collect();
        let mut sign = 1.0;
        for k in 0..n {
            let pivot = (k..n)
                .max_by(|&a, &b| lu[(a, k)].abs().partial_cmp(&lu[(b, k)].abs()).unwrap())
                .unwrap();
            if lu[(pivot, k)].abs() < EPSILON {
                return Err(MatrixError::Singular);
            }
            if pivot != k {
                for c in 0..n {
                    lu.data.swap(k * n + c, pivot * n + c);
                }
                perm.swap(k, pivot);
                sign = -sign;
            }
            for r in (k + 1)..n {
                let factor = lu[(r, k)] / lu[(k, k)];
                lu[(r, k)] = factor;
                for c in (k + 1)..n {
                    lu[(r, c)] -= factor * lu[(k, c)];
                }
            }
        }
        Ok((lu, perm, sign))
    }

    pub fn determinant(&self) -> Result<f64, MatrixError> {
        match self.lu() {
            Ok((lu, _, sign)) => Ok((0..self.rows).map(|i| lu[(i, i)]).product::<f64>() * sign),
            Err(MatrixError::Singular) => Ok(0.0),
            Err(other) => Err(other),
        }
    }

    /// Solve `self * x = b` for `x`.
    pub fn solve(&self, b: &[f64]) -> Result<Vec<f64>, MatrixError> {
        if b.len() != self.rows {
            return Err(MatrixError::DimensionMismatch { expected: (self.rows, 1), found: (b.len(), 1) });
        }
        let (lu, perm, _) = self.lu()?;
        let n = self.rows;
        let mut y: Vec<f64> = perm.iter().map(|&p| b[p]).collect();
        for i in 0..n {
            for j in 0..i {
                y[i] -= lu[(i, j)] * y[j];
            }
        }
        for i in (0..n).rev() {
            for j in (i + 1)..n {
                y[i] -= lu[(i, j)] * y[j];
            }
            y[i] /= lu[(i, i)];
        }
        Ok(y)
    }
}

impl Index<(usize, usize)> for Matrix {
    type Output = f64;
    fn index(&self, (r, c): (usize, usize)) -> &f64 {
        assert!(r < self.rows && c < self.cols, "index ({}, {}) out of bounds", r, c);
        &self.data[r * self.cols + c]
    }
}

impl IndexMut<(usize, usize)> for Matrix {
    fn index_mut(&mut self, (r, c): (usize, usize)) -> &mut f64 {
        assert!(r < self.rows && c < self.cols, "index ({}, {}) out of bounds", r, c);
        &mut self.data[r * self.cols + c]
    }
}

fn zip_with(a: &Matrix, b: &Matrix, op: impl Fn(f64, f64) -> f64) -> Matrix {
    assert_eq!((a.rows, a.cols), (b.rows, b.cols), "matrix shapes differ");
    let data = a.data.iter().zip(&b.data).map(|(&x, &y)| op(x, y)).collect();
    Matrix { rows: a.rows, cols: a.cols, data }
}

impl<'a> Add for &'a Matrix {
    type Output = Matrix;
    fn add(self, other: &'a Matrix) -> Matrix {
        zip_with(self, other, |x, y| x + y)
    }
}

impl<'a> Sub for &'a Matrix {
    type Output = Matrix;
    fn sub(self, other: &'a Matrix) -> Matrix {
        zip_with(self, other, |x, y| x - y)
    }
}

impl<'a> Mul for &'a Matrix {
    type Output = Matrix;
    fn mul(self, other: &'a Matrix) -> Matrix {
        self.try_mul(other).expect("incompatible shapes for multiplication")
    }
}

impl fmt::Display for Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in 0..self.rows {
            let cells: Vec<String> = self.row(r).iter().map(|x| format!("{:>9.4}", x)).collect();
            writeln!(f, "[{}]", cells.join(" "))?;
        }
        Ok(())
    }
}

//! How a measured cost grows with size — flat, logarithmically or linearly — judged from the
//! curve's points, and the one line that says so with the design's reason for it.
use serde::Serialize;

/// Costs within this factor of each other are flat: run-to-run noise on this machine is of that
/// order.
const FLAT_FACTOR: f64 = 1.3;

/// The shape of a curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Growth {
    Flat,
    Logarithmic,
    Linear,
    /// Cheaper at the larger sizes (fixed costs spread thinner, or a saturated resource).
    Falls,
}

/// A curve's shape, and the size from which it is flat when it levels off after a rise or fall.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Shape {
    pub growth: Growth,
    pub flat_from: Option<f64>,
}

impl Shape {
    /// The shape of `points` ((size, cost), sizes ascending): flat when every cost is within
    /// [`FLAT_FACTOR`] of the others, or from the first size after which they all are; else
    /// whichever of `a + b·size` and `a + b·ln size` fits the costs better (least squares: a
    /// fixed part does not hide a linear cost). With two points, cost growing as size^0.6 or
    /// faster is linear. `None` for fewer than two points, or costs that are not positive.
    pub(crate) fn of(points: &[(f64, f64)]) -> Option<Shape> {
        if points.len() < 2 || points.iter().any(|&(x, y)| x <= 0.0 || y <= 0.0) {
            return None;
        }
        let shape = |growth| {
            Some(Shape {
                growth,
                flat_from: None,
            })
        };
        if flat(points) {
            return shape(Growth::Flat);
        }
        if let Some(i) = (1..points.len() - 1).find(|&i| flat(&points[i..])) {
            return Some(Shape {
                growth: Growth::Flat,
                flat_from: Some(points[i].0),
            });
        }
        let linear = fit(points, |x| x);
        let log = fit(points, f64::ln);
        let (slope, linear_wins) = if points.len() == 2 {
            let (&(x0, y0), &(x1, y1)) = (points.first()?, points.last()?);
            (y1 - y0, (y1 / y0).ln() / (x1 / x0).ln() >= 0.6)
        } else {
            let best = if linear.residual <= log.residual {
                linear
            } else {
                log
            };
            (best.slope, linear.residual <= log.residual)
        };
        if slope < 0.0 {
            shape(Growth::Falls)
        } else if linear_wins {
            shape(Growth::Linear)
        } else {
            shape(Growth::Logarithmic)
        }
    }

    fn words(self) -> String {
        let words = match self.growth {
            Growth::Flat => "flat",
            Growth::Logarithmic => "grows logarithmically",
            Growth::Linear => "grows linearly",
            Growth::Falls => "falls",
        };
        match self.flat_from {
            Some(x) => format!("{words} from {} on", num(x)),
            None => words.to_string(),
        }
    }
}

/// Whether every cost of `points` is within [`FLAT_FACTOR`] of every other.
fn flat(points: &[(f64, f64)]) -> bool {
    let (lo, hi) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &(_, y)| {
            (lo.min(y), hi.max(y))
        });
    hi <= lo * FLAT_FACTOR
}

/// A least-squares line through (f(size), cost).
#[derive(Clone, Copy)]
struct Fit {
    slope: f64,
    /// Sum of squared residuals.
    residual: f64,
}

fn fit(points: &[(f64, f64)], f: impl Fn(f64) -> f64) -> Fit {
    let n = points.len() as f64;
    let xs: Vec<f64> = points.iter().map(|&(x, _)| f(x)).collect();
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = points.iter().map(|&(_, y)| y).sum::<f64>() / n;
    let sxx: f64 = xs.iter().map(|x| (x - mean_x).powi(2)).sum();
    let sxy: f64 = xs
        .iter()
        .zip(points)
        .map(|(x, &(_, y))| (x - mean_x) * (y - mean_y))
        .sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let residual = xs
        .iter()
        .zip(points)
        .map(|(x, &(_, y))| (y - mean_y - slope * (x - mean_x)).powi(2))
        .sum();
    Fit { slope, residual }
}

/// What a curve is expected to do, and why.
pub(crate) struct Expectation {
    pub growth: Growth,
    pub why: &'static str,
}

/// A measured curve's verdict.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Verdict {
    pub what: String,
    pub measured: Option<Shape>,
    pub expected: Growth,
    /// The line: what it did, from what to what, and why.
    pub line: String,
}

/// The verdict on `points` of `what` (in `unit`, sizes in `size_unit`).
pub(crate) fn verdict(
    what: &str,
    unit: &str,
    size_unit: &str,
    points: &[(f64, f64)],
    expected: &Expectation,
) -> Verdict {
    let measured = Shape::of(points);
    let span = match (points.first(), points.last()) {
        (Some(&(x0, y0)), Some(&(x1, y1))) => {
            format!(
                " ({} → {} {unit} from {} to {} {size_unit})",
                num(y0),
                num(y1),
                num(x0),
                num(x1)
            )
        }
        _ => String::new(),
    };
    let expected_words = Shape {
        growth: expected.growth,
        flat_from: None,
    }
    .words();
    let shape = match measured {
        Some(shape) if shape.growth == expected.growth => shape.words(),
        Some(shape) => format!("{}, expected {expected_words}", shape.words()),
        None => "not measured".to_string(),
    };
    Verdict {
        what: what.to_string(),
        measured,
        expected: expected.growth,
        line: format!("{what} {shape}{span}: {}", expected.why),
    }
}

/// A measured value: a whole number as one, else to about three significant figures.
fn num(value: f64) -> String {
    if value.abs() >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let growth = |points: &[(f64, f64)]| Shape::of(points).map(|s| (s.growth, s.flat_from));
        let flat = [(1e4, 1.0), (1e5, 1.1), (1e6, 1.2)];
        let log = [(1e4, 1.0), (1e5, 1.5), (1e6, 2.0)];
        // A fixed 20 plus 17 a thousand: linear, though the end points grow by under 4×.
        let linear = [(200.0, 23.4), (1e3, 37.0), (4e3, 88.0)];
        let levels_off = [(10.0, 117.0), (100.0, 328.0), (1e3, 288.0)];
        let falls = [(10.0, 100.0), (1e3, 50.0), (1e4, 20.0)];
        assert_eq!(growth(&flat), Some((Growth::Flat, None)));
        assert_eq!(growth(&log), Some((Growth::Logarithmic, None)));
        assert_eq!(growth(&linear), Some((Growth::Linear, None)));
        assert_eq!(growth(&levels_off), Some((Growth::Flat, Some(100.0))));
        assert_eq!(growth(&falls), Some((Growth::Falls, None)));
        assert_eq!(
            growth(&[(1.0, 1.0), (16.0, 8.0)]),
            Some((Growth::Linear, None))
        );
        assert_eq!(growth(&[(1.0, 1.0)]), None);
    }

    #[test]
    fn the_line_says_what_was_expected() {
        let expected = Expectation {
            growth: Growth::Flat,
            why: "bounded by the checkpoint",
        };
        let v = verdict("restart", "s", "GiB", &[(1.0, 0.1), (16.0, 1.0)], &expected);
        assert_eq!(v.measured.map(|s| s.growth), Some(Growth::Linear));
        assert!(
            v.line.contains("grows linearly, expected flat"),
            "{}",
            v.line
        );
        assert!(
            v.line.ends_with(": bounded by the checkpoint"),
            "{}",
            v.line
        );
    }
}

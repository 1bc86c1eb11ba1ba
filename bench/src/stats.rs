//! Order statistics over samples in milliseconds (or any f64): the suite reports
//! medians, tail percentiles and maxima, never means, because the machine is noisy.

/// Sorted samples, so every statistic is a lookup.
#[derive(Clone, Debug, Default)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn new(mut values: Vec<f64>) -> Self {
        values.retain(|v| v.is_finite());
        values.sort_by(f64::total_cmp);
        Samples(values)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Nearest-rank percentile, `q` in 0..=1; NaN when there are no samples.
    pub fn percentile(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let rank = (q * self.0.len() as f64).ceil() as usize;
        self.0[rank.clamp(1, self.0.len()) - 1]
    }

    pub fn median(&self) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let n = self.0.len();
        if n % 2 == 1 {
            self.0[n / 2]
        } else {
            (self.0[n / 2 - 1] + self.0[n / 2]) / 2.0
        }
    }

    /// These samples and `other`'s together.
    pub fn pooled(&self, other: &Samples) -> Samples {
        Samples::new([self.0.as_slice(), other.0.as_slice()].concat())
    }

    pub fn sum(&self) -> f64 {
        self.0.iter().sum()
    }

    pub fn max(&self) -> f64 {
        self.0.last().copied().unwrap_or(f64::NAN)
    }
}

impl FromIterator<f64> for Samples {
    fn from_iter<I: IntoIterator<Item = f64>>(iter: I) -> Self {
        Samples::new(iter.into_iter().collect())
    }
}

/// `a / b`, formatted as a ratio ("0.42×"), or "n/a" when undefined.
pub fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "n/a".into()
    }
}

/// A duration in ms with precision that suits its size.
pub fn ms(v: f64) -> String {
    // An empty float sum is -0.0; print it as 0.
    let v = v + 0.0;
    if !v.is_finite() {
        "n/a".into()
    } else if v < 10.0 {
        format!("{v:.2} ms")
    } else if v < 1000.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

/// A count: whole numbers as such, a median between two as one decimal.
pub fn count(v: f64) -> String {
    match v.is_finite() {
        true if v.fract() == 0.0 => format!("{v:.0}"),
        true => format!("{v:.1}"),
        false => "n/a".into(),
    }
}

/// A latency column: "p50 / p99".
pub fn p50_p99(s: &Samples) -> String {
    format!("{} / {}", ms(s.median()), ms(s.percentile(0.99)))
}

/// A column of counts: "median / max".
pub fn median_max(s: &Samples) -> String {
    format!("{} / {}", count(s.median()), count(s.max()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let s: Samples = (1..=100).map(f64::from).collect();
        assert_eq!(s.percentile(0.5), 50.0);
        assert_eq!(s.percentile(0.99), 99.0);
        assert_eq!(s.median(), 50.5);
        assert_eq!(s.max(), 100.0);
        assert!(Samples::default().median().is_nan());
    }
}

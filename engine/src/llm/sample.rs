//! Choosing the next token from logits: greedy (the first largest logit, as `torch.argmax`),
//! or sampling with temperature, top-k and top-p from a seeded generator, so that a seed gives
//! the same tokens on every run and machine.

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0 picks the largest logit (greedy); above 0 divides the logits before the softmax.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// The generator's seed.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

impl Sampling {
    /// Whether the options are usable; `Err` says which is not.
    pub fn check(&self) -> Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!(
                "temperature {} must be 0 (greedy) or more",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        Ok(())
    }
}

/// xoshiro256** seeded through splitmix64 (Blackman and Vigna): a few lines with a fixed,
/// documented output sequence, where a crate's generator may change its stream between
/// versions and with it every seeded result.
#[derive(Debug, Clone)]
pub struct Rng([u64; 4]);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng([next(), next(), next(), next()])
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Picks tokens by [`Sampling`]; holds the generator's state between tokens.
#[derive(Debug, Clone)]
pub struct Sampler {
    pub sampling: Sampling,
    rng: Rng,
}

/// The index of the first largest value (NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    pub fn new(sampling: Sampling) -> Sampler {
        Sampler {
            sampling,
            rng: Rng::new(sampling.seed),
        }
    }

    /// The next token from one row of logits.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let s = self.sampling;
        if s.temperature == 0.0 || s.top_k == 1 {
            return argmax(logits);
        }
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let by_logit = |a: &u32, b: &u32| {
            logits[*b as usize]
                .partial_cmp(&logits[*a as usize])
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.cmp(b))
        };
        if s.top_k > 0 && s.top_k < idx.len() {
            idx.select_nth_unstable_by(s.top_k - 1, by_logit);
            idx.truncate(s.top_k);
        }
        idx.sort_unstable_by(by_logit);
        let max = logits[idx[0] as usize] as f64;
        let t = s.temperature as f64;
        let mut p: Vec<f64> = idx
            .iter()
            .map(|&i| ((logits[i as usize] as f64 - max) / t).exp())
            .collect();
        let total: f64 = p.iter().sum();
        p.iter_mut().for_each(|x| *x /= total);
        if s.top_p < 1.0 {
            let mut acc = 0.0;
            let keep = p
                .iter()
                .position(|&x| {
                    acc += x;
                    acc >= s.top_p as f64
                })
                .map_or(p.len(), |i| i + 1);
            p.truncate(keep);
            let total: f64 = p.iter().sum();
            p.iter_mut().for_each(|x| *x /= total);
        }
        let r = self.rng.next_f64();
        let mut acc = 0.0;
        for (i, &x) in p.iter().enumerate() {
            acc += x;
            if r < acc {
                return idx[i];
            }
        }
        idx[p.len() - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest_logit() {
        let mut s = Sampler::new(Sampling::default());
        assert_eq!(s.sample(&[0.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0]), 1);
    }

    #[test]
    fn a_seed_gives_the_same_tokens_and_top_k_limits_them() {
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32 * 0.3).collect();
        let opts = Sampling {
            temperature: 1.0,
            top_k: 10,
            top_p: 0.9,
            seed: 42,
        };
        let run = |o| {
            let mut s = Sampler::new(o);
            (0..50).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(opts), run(opts));
        assert_ne!(run(opts), run(Sampling { seed: 43, ..opts }));
        let top: Vec<u32> = {
            let mut i: Vec<u32> = (0..100).collect();
            i.sort_by(|a, b| {
                logits[*b as usize]
                    .partial_cmp(&logits[*a as usize])
                    .unwrap()
                    .then(a.cmp(b))
            });
            i[..10].to_vec()
        };
        assert!(run(opts).iter().all(|t| top.contains(t)));
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        // One token holds almost all the probability: top_p 0.5 keeps only it.
        let mut logits = vec![0.0f32; 50];
        logits[7] = 20.0;
        let mut s = Sampler::new(Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
            seed: 1,
        });
        assert!((0..20).all(|_| s.sample(&logits) == 7));
        assert!(Sampling {
            top_p: 0.0,
            ..Sampling::default()
        }
        .check()
        .is_err());
        assert!(Sampling {
            temperature: -1.0,
            ..Sampling::default()
        }
        .check()
        .is_err());
    }
}

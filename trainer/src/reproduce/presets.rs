//! The grids `reproduce` knows: which tasks, which (connection, adversarial training) arms, which
//! seeds, how much data and which learning rates each preset stands for.

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use shared::data::Task;
use shared::ConnectionSpec;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// Block 1, SST-2 low-resource (the paper's Tables 1 and 3): BERT, EX-BERT, the paper's
    /// IM-BERT, the recommended IM-BERT on all layers and on each third of them, CreAT and PGD-AT
    /// on BERT; 3 seeds.
    Sst2,
    /// Block 2 (Table 4's shape): the recommended IM with T = 1, 5, 10, 15 on `--im-layers`
    /// (the best layer group of block 1), SST-2 low-resource, 3 seeds.
    TSweep,
    /// Block 3 (Table 2's shape): QNLI, QQP, MNLI and RTE low-resource; BERT, EX-BERT and the
    /// recommended IM-BERT; 3 seeds.
    LowResource,
    /// Table 1: all tasks, BERT / EX-BERT / the paper's IM-BERT, full training data, one seed.
    Table1,
    /// Block 4 (Table 4): TextFooler against block 1's BERT and recommended IM-BERT on all
    /// layers, on SST-2 dev and IMDB (`attack_block.rs`). Not a training grid: it needs block 1.
    Attack,
    /// IM on all layers, each training-gradient choice (exact, detached, frozen) with the paper's
    /// fixed step and with backtracking (SST-2 low-resource, seed 0; docs/numerics.md).
    GradientStudy,
}

impl Preset {
    /// The name on the command line (`t-sweep`).
    pub fn name(self) -> String {
        self.to_possible_value().map_or_else(|| format!("{self:?}"), |v| v.get_name().to_string())
    }
}

/// One line of a grid: a connection, trained with or without adversarial training.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arm {
    /// Canonical connection spec (`ConnectionSpec::to_spec_string`), so that a cell's name does
    /// not depend on how its spec was typed.
    pub connection: String,
    /// `none`, `creat` or `pgd`.
    pub adv: &'static str,
}

/// What a preset varies. Every (task, arm) pair is trained once per seed; with more than one
/// learning rate, the first seed trains at each of them and the rest at the one with the lowest
/// validation loss.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    pub tasks: Vec<Task>,
    pub arms: Vec<Arm>,
    pub seeds: Vec<u64>,
    /// (train, validation) examples; `None`: the whole split, 8:2.
    pub samples: (Option<usize>, Option<usize>),
    pub lrs: Vec<f64>,
    pub epochs: usize,
    /// Clean accuracy on a fixed sample of this many GLUE dev examples (`eval --clean-sample`).
    pub clean_sample: Option<usize>,
}

/// The low-resource protocol: 1000 training and 500 validation examples.
pub const LOW_RESOURCE: (Option<usize>, Option<usize>) = (Some(1000), Some(500));

/// The learning rates every low-resource arm is searched over on seed 0: the paper's 2e-5 and
/// the 1e-4 that warm-started MiniLM needed in the gradient study (docs/numerics.md). The same
/// two for every connection, so that every arm gets the same search budget.
pub const SEARCHED_LRS: [f64; 2] = [2e-5, 1e-4];

/// GLUE dev examples per split behind the pair tasks' clean accuracy in the low-resource grid.
pub const PAIR_TASK_CLEAN_SAMPLE: usize = 2000;

/// Epochs per low-resource run (126 steps at batch 16): the gradient study's budget; the best
/// validation epoch is kept. Three would cost IM on all layers another ~30 minutes per run on
/// two cores.
pub const LOW_RESOURCE_EPOCHS: usize = 2;

fn arm(spec: &str, adv: &'static str) -> Result<Arm> {
    let connection =
        ConnectionSpec::parse(spec).with_context(|| format!("connection {spec}"))?.to_spec_string();
    Ok(Arm { connection, adv })
}

/// The recommended IM (`shared::RECOMMENDED_IM`) with `T` and the layer range replaced.
pub(super) fn recommended_im(iterations: Option<usize>, layers: Option<&str>) -> Result<String> {
    Ok(ConnectionSpec::parse(shared::RECOMMENDED_IM)?
        .with_flags(iterations, None, layers)?
        .to_spec_string())
}

/// The paper's Table 3 groups (thirds of the depth) as `--im-layers` ranges: 0-1, 2-3, 4-5 on
/// MiniLM's six layers, 0-3, 4-7, 8-11 on bert-base.
pub fn layer_thirds(num_layers: usize) -> Vec<String> {
    let third = (num_layers / 3).max(1);
    (0..num_layers)
        .step_by(third)
        .map(|a| format!("{a}-{}", (a + third - 1).min(num_layers - 1)))
        .collect()
}

impl Grid {
    /// The preset's grid for a model of `num_layers` layers; `t_sweep_layers` is the T sweep's
    /// layer range (`None`: all layers).
    pub fn of(preset: Preset, num_layers: usize, t_sweep_layers: Option<&str>) -> Result<Grid> {
        let grid = Self::unchecked(preset, num_layers, t_sweep_layers)?;
        for arm in &grid.arms {
            ConnectionSpec::parse(&arm.connection)?
                .per_layer(num_layers)
                .with_context(|| format!("connection {} on {num_layers} layers", arm.connection))?;
        }
        Ok(grid)
    }

    fn unchecked(preset: Preset, num_layers: usize, t_sweep_layers: Option<&str>) -> Result<Grid> {
        let paper_im = "im:T=5,gamma=0.1";
        let rec = recommended_im(None, None)?;
        let seeds = vec![0, 1, 2];
        let low = |tasks, arms| Grid {
            tasks,
            arms,
            seeds: seeds.clone(),
            samples: LOW_RESOURCE,
            lrs: SEARCHED_LRS.to_vec(),
            epochs: LOW_RESOURCE_EPOCHS,
            clean_sample: None,
        };
        Ok(match preset {
            Preset::Sst2 => {
                // Cheapest first, so that whole rows land early; IM on all layers last.
                let mut arms = vec![
                    arm("bert", "none")?,
                    arm("ex", "none")?,
                    arm("bert", "creat")?,
                    arm("bert", "pgd")?,
                ];
                for layers in layer_thirds(num_layers) {
                    arms.push(arm(&recommended_im(None, Some(&layers))?, "none")?);
                }
                arms.push(arm(&rec, "none")?);
                arms.push(arm(paper_im, "none")?);
                low(vec![Task::Sst2], arms)
            }
            Preset::TSweep => {
                let arms = [1, 5, 10, 15]
                    .iter()
                    .map(|&t| arm(&recommended_im(Some(t), t_sweep_layers)?, "none"))
                    .collect::<Result<_>>()?;
                low(vec![Task::Sst2], arms)
            }
            Preset::LowResource => Grid {
                // The pair tasks' dev sets run to 40k pairs: a fixed 2,000 of each is enough.
                clean_sample: Some(PAIR_TASK_CLEAN_SAMPLE),
                ..low(
                    vec![Task::Qnli, Task::Qqp, Task::Mnli, Task::Rte],
                    vec![arm("bert", "none")?, arm("ex", "none")?, arm(&rec, "none")?],
                )
            },
            Preset::Table1 => Grid {
                tasks: vec![Task::Sst2, Task::Qqp, Task::Qnli, Task::Mnli, Task::Rte],
                arms: vec![arm("bert", "none")?, arm("ex", "none")?, arm(paper_im, "none")?],
                seeds: vec![42],
                samples: (None, None),
                lrs: vec![2e-5],
                epochs: 3,
                clean_sample: None,
            },
            Preset::Attack => bail!("the attack block trains nothing: it attacks block 1's models"),
            Preset::GradientStudy => {
                // Cheapest first; the exact gradient at the fixed step (known to stay at chance,
                // docs/numerics.md) last. Its committed runs used `--lrs 1e-4`.
                let arms = [
                    ",grad=frozen",
                    ",grad=detached",
                    ",grad=frozen,step=backtrack",
                    ",grad=detached,step=backtrack",
                    ",step=backtrack",
                    "",
                ]
                .iter()
                .map(|g| arm(&format!("{paper_im}{g}"), "none"))
                .collect::<Result<_>>()?;
                Grid { seeds: vec![0], lrs: vec![1e-4], ..low(vec![Task::Sst2], arms) }
            }
        })
    }

    /// Whether the first seed searches the learning rate.
    pub fn searches_lr(&self) -> bool {
        self.lrs.len() > 1
    }

    /// The same grid at smoke budgets: 32 training and 16 validation examples, the first two
    /// seeds (so that the learning rate chosen on the first carries over to the second), every
    /// task, arm and learning rate kept, so that the whole path runs in minutes.
    pub fn smoke(mut self) -> Grid {
        self.samples = (Some(32), Some(16));
        self.seeds.truncate(2);
        self.epochs = 1;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(grid: &Grid) -> Vec<(String, &'static str)> {
        grid.arms.iter().map(|a| (a.connection.clone(), a.adv)).collect()
    }

    #[test]
    fn presets_have_the_paper_shapes() {
        let rec = shared::RECOMMENDED_IM;
        let sst2 = Grid::of(Preset::Sst2, 6, None).unwrap();
        let expected: Vec<(String, &str)> = vec![
            ("bert".into(), "none"),
            ("ex".into(), "none"),
            ("bert".into(), "creat"),
            ("bert".into(), "pgd"),
            (format!("{rec},layers=0-1"), "none"),
            (format!("{rec},layers=2-3"), "none"),
            (format!("{rec},layers=4-5"), "none"),
            (rec.into(), "none"),
            ("im:T=5,gamma=0.1".into(), "none"),
        ];
        assert_eq!(specs(&sst2), expected);
        assert_eq!((sst2.seeds.as_slice(), sst2.samples), ([0, 1, 2].as_slice(), LOW_RESOURCE));
        assert!(sst2.searches_lr());
        assert_eq!(layer_thirds(12), ["0-3", "4-7", "8-11"]);
        assert_eq!(layer_thirds(2), ["0-0", "1-1"]);

        let sweep = Grid::of(Preset::TSweep, 6, Some("4-5")).unwrap();
        let sweep: Vec<String> = sweep.arms.into_iter().map(|a| a.connection).collect();
        assert_eq!(
            sweep,
            [1, 5, 10, 15]
                .map(|t| format!("im:T={t},gamma=0.1,grad=detached,step=backtrack,layers=4-5"))
        );
        let low = Grid::of(Preset::LowResource, 6, None).unwrap();
        assert_eq!((low.tasks.len(), low.arms.len()), (4, 3));
        assert!(!low.tasks.contains(&Task::Sst2), "SST-2 is block 1's");
        assert_eq!((low.clean_sample, sst2.clean_sample), (Some(2000), None));
        let table1 = Grid::of(Preset::Table1, 12, None).unwrap();
        assert_eq!((table1.tasks.len(), table1.arms.len(), table1.samples), (5, 3, (None, None)));
        assert!(!table1.searches_lr());
        let study = Grid::of(Preset::GradientStudy, 6, None).unwrap();
        assert_eq!((study.arms.len(), study.lrs.as_slice()), (6, [1e-4].as_slice()));
        assert!(Grid::of(Preset::Attack, 6, None).is_err(), "the attack block is no grid");
        for preset in Preset::value_variants().iter().filter(|p| **p != Preset::Attack) {
            for a in Grid::of(*preset, 6, None).unwrap().arms {
                let canonical = ConnectionSpec::parse(&a.connection).unwrap().to_spec_string();
                assert_eq!(canonical, a.connection, "the cell's name is its canonical spec");
            }
        }
        let smoke = Grid::of(Preset::Sst2, 6, None).unwrap().smoke();
        assert_eq!((smoke.seeds.as_slice(), smoke.arms.len()), ([0, 1].as_slice(), 9));
        assert!(Grid::of(Preset::TSweep, 6, Some("5-9")).is_err(), "a range past the model");
    }
}

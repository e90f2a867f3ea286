//! Optimization tiers: the runtime's `OptimizationTier` values, the names cdac prints, and
//! how the tier of a default (synthetic) code version is derived, since the runtime stores
//! none for it.

use serde::Serialize;

/// The optimization tier of one native code version, in the terms SOS uses (`dumpmd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Tier 0: jitted quickly, with call counting.
    QuickJitted,
    /// Tier 0 with instrumentation for profile-guided optimization.
    QuickJittedInstrumented,
    /// Tier 1: rejitted optimized once hot.
    OptimizedTier1,
    /// Tier 1 with instrumentation (the hot method's precompiled code was not profiled).
    OptimizedTier1Instrumented,
    /// On-stack replacement: optimized code entered from a loop of tier-0 code.
    OptimizedTier1Osr,
    /// Jitted optimized without tiering (not eligible, or call counting disabled).
    Optimized,
    /// Jitted with optimizations disabled (`NoOptimization`).
    MinOptJitted,
    /// Precompiled code (ReadyToRun).
    ReadyToRun,
    /// Not determinable from what the target holds.
    Unknown,
}

impl Tier {
    /// Every tier.
    pub const ALL: [Tier; 9] = [
        Tier::QuickJitted,
        Tier::QuickJittedInstrumented,
        Tier::OptimizedTier1,
        Tier::OptimizedTier1Instrumented,
        Tier::OptimizedTier1Osr,
        Tier::Optimized,
        Tier::MinOptJitted,
        Tier::ReadyToRun,
        Tier::Unknown,
    ];

    /// The name in output and JSON (`optimized_tier1`).
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::QuickJitted => "quick_jitted",
            Tier::QuickJittedInstrumented => "quick_jitted_instrumented",
            Tier::OptimizedTier1 => "optimized_tier1",
            Tier::OptimizedTier1Instrumented => "optimized_tier1_instrumented",
            Tier::OptimizedTier1Osr => "optimized_tier1_osr",
            Tier::Optimized => "optimized",
            Tier::MinOptJitted => "min_opt_jitted",
            Tier::ReadyToRun => "ready_to_run",
            Tier::Unknown => "unknown",
        }
    }

    /// The tier a `NativeCodeVersionNode.OptimizationTier` value stands for (the runtime's
    /// enum, unchanged since .NET 7: Tier0 0, Tier1 1, Tier1OSR 2, Optimized 3,
    /// Tier0Instrumented 4, Tier1Instrumented 5); other values are `Unknown`.
    pub fn from_node_value(value: u32) -> Tier {
        match value {
            0 => Tier::QuickJitted,
            1 => Tier::OptimizedTier1,
            2 => Tier::OptimizedTier1Osr,
            3 => Tier::Optimized,
            4 => Tier::QuickJittedInstrumented,
            5 => Tier::OptimizedTier1Instrumented,
            _ => Tier::Unknown,
        }
    }

    /// The tier a perf-map suffix names (`DOTNET_PerfMapShowOptimizationTiers=1`:
    /// `QuickJitted`, `InstrumentedTier`, `OptimizedTier1`, `InstrumentedTierOptimized`,
    /// `OptimizedTier1OSR`, `Optimized`, `MinOptJitted`, and `PreJIT` for precompiled code
    /// in a jitdump); `None` for anything else.
    pub fn from_perf_map(suffix: &str) -> Option<Tier> {
        Some(match suffix {
            "QuickJitted" => Tier::QuickJitted,
            "InstrumentedTier" => Tier::QuickJittedInstrumented,
            "OptimizedTier1" => Tier::OptimizedTier1,
            "InstrumentedTierOptimized" => Tier::OptimizedTier1Instrumented,
            "OptimizedTier1OSR" => Tier::OptimizedTier1Osr,
            "Optimized" => Tier::Optimized,
            "MinOptJitted" => Tier::MinOptJitted,
            "PreJIT" => Tier::ReadyToRun,
            _ => return None,
        })
    }

    /// The tier SOS's `dumpmd` prints (`OptimizedTier1 + Instrumented`), `None` for a
    /// string it does not print.
    pub fn from_sos(text: &str) -> Option<Tier> {
        Some(match text {
            "QuickJitted" => Tier::QuickJitted,
            "QuickJitted + Instrumented" => Tier::QuickJittedInstrumented,
            "OptimizedTier1" => Tier::OptimizedTier1,
            "OptimizedTier1 + Instrumented" => Tier::OptimizedTier1Instrumented,
            "OptimizedTier1OSR" => Tier::OptimizedTier1Osr,
            "Optimized" => Tier::Optimized,
            "MinOptJitted" => Tier::MinOptJitted,
            "ReadyToRun" => Tier::ReadyToRun,
            "Unknown Tier" => Tier::Unknown,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `MethodImplAttributes.NoOptimization`.
pub const IMPL_NO_OPTIMIZATION: u16 = 0x0040;
/// `MethodImplAttributes.AggressiveOptimization`.
pub const IMPL_AGGRESSIVE_OPTIMIZATION: u16 = 0x0200;

/// What the tier of a default code version depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultTierInputs {
    /// Its code is precompiled (in a ReadyToRun image).
    pub ready_to_run: bool,
    /// The MethodDesc is eligible for tiered compilation.
    pub eligible: bool,
    /// The method's metadata `ImplFlags`, when known (0 for methods without metadata).
    pub impl_flags: Option<u16>,
    /// The call-counting record of the default version says counting is disabled
    /// (`Some(true)`), there is no such record or it says otherwise (`Some(false)`), or it
    /// cannot be read (`None`).
    pub call_counting_disabled: Option<bool>,
}

/// The tier of a default code version, as the runtime derives it when asked
/// (`GetInitialOptimizationTier` then the DAC's mapping): precompiled code is ReadyToRun;
/// a method eligible for tiering starts at tier 0 unless it asked for aggressive
/// optimization (tier 1, .NET 8) or its call counting was disabled (jitted optimized); a
/// method not eligible is `MinOptJitted` when it asked for `NoOptimization`, else
/// `Optimized`. Process-wide settings that disable optimization (`DOTNET_JitMinOpts`, a
/// debugger's control of a module) are not in the target's data and are taken to be off.
pub fn default_tier(i: DefaultTierInputs) -> Tier {
    if i.ready_to_run {
        return Tier::ReadyToRun;
    }
    let flag = |bit: u16| i.impl_flags.map(|f| f & bit != 0);
    if i.eligible {
        match (flag(IMPL_AGGRESSIVE_OPTIMIZATION), i.call_counting_disabled) {
            (Some(true), _) => Tier::OptimizedTier1,
            (_, Some(false)) => Tier::QuickJitted,
            (Some(false), Some(true)) => Tier::Optimized,
            _ => Tier::Unknown,
        }
    } else {
        match flag(IMPL_NO_OPTIMIZATION) {
            Some(true) => Tier::MinOptJitted,
            Some(false) => Tier::Optimized,
            None => Tier::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> DefaultTierInputs {
        DefaultTierInputs {
            ready_to_run: false,
            eligible: true,
            impl_flags: Some(0),
            call_counting_disabled: Some(false),
        }
    }

    #[test]
    fn default_versions_follow_the_runtime_rules() {
        let i = inputs();
        assert_eq!(default_tier(i), Tier::QuickJitted);
        let r2r = DefaultTierInputs {
            ready_to_run: true,
            ..i
        };
        assert_eq!(default_tier(r2r), Tier::ReadyToRun);
        let disabled = DefaultTierInputs {
            call_counting_disabled: Some(true),
            ..i
        };
        assert_eq!(default_tier(disabled), Tier::Optimized);
        let aggressive = DefaultTierInputs {
            impl_flags: Some(IMPL_AGGRESSIVE_OPTIMIZATION),
            call_counting_disabled: Some(true),
            ..i
        };
        assert_eq!(default_tier(aggressive), Tier::OptimizedTier1);
        // Disabled counting without the metadata: tier 1 or optimized, not told apart.
        let unknown = DefaultTierInputs {
            impl_flags: None,
            call_counting_disabled: Some(true),
            ..i
        };
        assert_eq!(default_tier(unknown), Tier::Unknown);
        let unreadable = DefaultTierInputs {
            call_counting_disabled: None,
            ..i
        };
        assert_eq!(default_tier(unreadable), Tier::Unknown);
        let not_eligible = DefaultTierInputs {
            eligible: false,
            ..i
        };
        assert_eq!(default_tier(not_eligible), Tier::Optimized);
        let no_opt = DefaultTierInputs {
            eligible: false,
            impl_flags: Some(IMPL_NO_OPTIMIZATION),
            ..i
        };
        assert_eq!(default_tier(no_opt), Tier::MinOptJitted);
        let no_flags = DefaultTierInputs {
            eligible: false,
            impl_flags: None,
            ..i
        };
        assert_eq!(default_tier(no_flags), Tier::Unknown);
    }

    #[test]
    fn names_round_trip() {
        for t in Tier::ALL {
            let json = serde_json::to_string(&t).expect("json");
            assert_eq!(json, format!("\"{}\"", t.as_str()));
        }
        for v in 0..6 {
            assert_ne!(Tier::from_node_value(v), Tier::Unknown);
        }
        assert_eq!(Tier::from_node_value(6), Tier::Unknown);
        assert_eq!(
            Tier::from_perf_map("InstrumentedTierOptimized"),
            Some(Tier::OptimizedTier1Instrumented)
        );
        assert_eq!(Tier::from_perf_map("Tier0"), None);
    }
}

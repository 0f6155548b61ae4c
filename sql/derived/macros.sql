-- Ratio helpers shared by every mart. Every factor is a ratio of sums of
-- chip-seconds (docs/metric.md section 1); an empty denominator gives null, not 0.
create or replace macro ratio(numerator, denominator) as
    case when denominator > 0 then numerator / denominator end;

-- Ideal chip-seconds as the metric reads them (docs/metric.md section 1, "Unknown and
-- empty factors"). job_window keeps ideal only beside profiled productive
-- time, null elsewhere; for a profiled job, productive time of 0 has an ideal
-- of 0 (known and empty); for a job without a sample, or whose PG is set aside
-- (pg_set_aside), ideal is null (unknown). Row by row, with the job's profile
-- from `job_profiles`, so the answer does not depend on when the job's first
-- sample arrived.
create or replace macro known_ideal(ideal, productive, profiled) as
    case when not profiled then null when ideal is null and productive = 0 then 0.0 else ideal end;

-- Profiled productive chip-seconds as the metric reads them: none for a job
-- whose PG is set aside, whose productive time then counts as unprofiled.
create or replace macro known_profiled(profiled_productive, profiled) as
    case when profiled then profiled_productive else 0.0 end;

-- A part over its whole (a factor, a share), which cannot pass 1. The sums
-- are float64 added in no fixed order, so a whole used to the full (a cluster
-- held to its last chip, steps at the peak) may come out a few ulps above 1,
-- and MPG multiplies three such factors: up to 1e-8 above 1 is rounding and
-- reads 1. Nothing larger is rounding: the rows that could cause it are left
-- out first (capacity_gaps, pg_set_aside), and the data-quality suite fails on
-- anything else rather than see it hidden.
create or replace macro at_most_one(value) as
    case when value > 1 and value <= 1 + 1e-8 then 1.0 else value end;

-- MPG = SG x RG x PG = (all_allocated / base) x (productive / all_allocated)
-- x (ideal / profiled_productive), written out so that the product of the
-- three factor columns is a check on this column, not its definition. With
-- full PG coverage it is ideal / base. A group with no productive time has
-- MPG 0, profiled or not; one with productive time but no profile has an
-- unknown PG and so an unknown MPG (docs/metric.md section 1, "Unknown and empty
-- factors").
create or replace macro mpg(ideal, productive, profiled_productive, base) as
    case
        when base is null or base <= 0 then null
        when productive = 0 then 0.0
        when profiled_productive > 0 then ideal * productive / (profiled_productive * base)
    end;

-- Whether a group's runtime factors are known: only where some job whose
-- runtime was measured held chips in it. A group whose held time no runtime
-- telemetry describes (a scheduler alone: Slurm or Kubernetes without training
-- logs), or that held nothing at all, has RG, PG and MPG unknown, never 0
-- (docs/metric.md section 1, "Unknown and empty factors"). A group with runtime
-- telemetry but nothing productive has RG 0 and MPG 0.
create or replace macro runtime_known(runtime_measured) as
    coalesce(runtime_measured, 0) > 0;

-- The one definition of a group's factors from its chip-second sums: every
-- mart, the headline and the report call this rather than writing the ratios
-- out. `base` is capacity for fleet and cluster groups, demand (lifetime) for
-- jobs and segments; `runtime_measured` is the all-allocated time of jobs whose
-- runtime was measured (job_window_enriched). Select it with unnest(...) to get
-- the five columns.
create or replace macro goodput_factors(all_allocated, productive, ideal, profiled_productive, base,
                                        runtime_measured) as {
    'sg': at_most_one(ratio(all_allocated, base)),
    'rg': case when runtime_known(runtime_measured)
               then at_most_one(ratio(productive, all_allocated)) end,
    'pg': case when runtime_known(runtime_measured)
               then at_most_one(ratio(ideal, profiled_productive)) end,
    'mpg': case when runtime_known(runtime_measured)
                then at_most_one(mpg(ideal, productive, profiled_productive, base)) end,
    'pg_coverage': case when runtime_known(runtime_measured)
                        then at_most_one(ratio(profiled_productive, productive)) end
};

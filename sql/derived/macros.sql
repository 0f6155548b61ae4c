-- Ratio helpers shared by every mart. Every factor is a ratio of sums of
-- chip-seconds (MPG.md section 1); an empty denominator gives null, not 0.
create or replace macro ratio(numerator, denominator) as
    case when denominator > 0 then numerator / denominator end;

-- Ideal chip-seconds as the metric reads them (MPG.md section 3, "Unknown and
-- empty factors"). job_window keeps ideal only beside profiled productive
-- time, null elsewhere; for a job with a profiler sample, productive time of
-- 0 has an ideal of 0 (known and empty), and without a sample ideal stays
-- null (unknown). Row by row, with the job's profile from `jobs`, so the
-- answer does not depend on when the job's first sample arrived.
create or replace macro known_ideal(ideal, productive, profiled) as
    case when ideal is null and productive = 0 and profiled then 0.0 else ideal end;

-- MPG = SG x RG x PG = (all_allocated / base) x (productive / all_allocated)
-- x (ideal / profiled_productive), written out so that the product of the
-- three factor columns is a check on this column, not its definition. With
-- full PG coverage it is ideal / base. A group with no productive time has
-- MPG 0, profiled or not; one with productive time but no profile has an
-- unknown PG and so an unknown MPG (MPG.md section 3, "Unknown and empty
-- factors").
create or replace macro mpg(ideal, productive, profiled_productive, base) as
    case
        when base is null or base <= 0 then null
        when productive = 0 then 0.0
        when profiled_productive > 0 then ideal * productive / (profiled_productive * base)
    end;

-- The one definition of a group's factors from its chip-second sums: every
-- mart, the headline and the report call this rather than writing the ratios
-- out. `base` is capacity for fleet and cluster groups, demand (lifetime) for
-- jobs and segments. Select it with unnest(...) to get the five columns.
create or replace macro goodput_factors(all_allocated, productive, ideal, profiled_productive, base) as {
    'sg': ratio(all_allocated, base),
    'rg': ratio(productive, all_allocated),
    'pg': ratio(ideal, profiled_productive),
    'mpg': mpg(ideal, productive, profiled_productive, base),
    'pg_coverage': ratio(profiled_productive, productive)
};

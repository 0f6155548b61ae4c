-- Jobs whose PG is set aside: in some window their productive steps claim
-- more ideal chip-time than the profiled productive chip-time they ran in,
-- i.e. more FLOPs than the chips' peak does in that time (docs/metric.md
-- section 3, "Ideal above the time it ran in"). Every sample is within its
-- peak (a sample above it is rejected), so the steps disagree with it: step
-- numbers that count more steps than ran, or steps much faster than the step
-- the sample profiled. Such a job's PG is unknown, never above 1: every view
-- counts its productive time as unprofiled (job_profiles), and this view says
-- which job, where, and why.
create or replace view pg_set_aside as
with

windows as (
    select * from job_window
),

above_peak as (
    select
        job_id,
        count(*) as windows_above_peak,
        min(window_start) as first_window_above_peak,
        max(ratio(ideal_chip_s, profiled_productive_chip_s)) as highest_window_pg
    from windows
    where ideal_chip_s > profiled_productive_chip_s * (1 + 1e-9) or not isfinite(ideal_chip_s)
    group by job_id
),

totals as (
    select
        job_id,
        sum(productive_chip_s) as productive_chip_s,
        sum(profiled_productive_chip_s) as profiled_productive_chip_s,
        sum(ideal_chip_s) as ideal_chip_s
    from windows
    where job_id in (select job_id from above_peak)
    group by job_id
),

final as (
    select
        above_peak.*,
        totals.* exclude (job_id),
        printf('ideal chip-time %.6g chip-s above the %.6g profiled productive chip-s it ran in '
               || '(PG up to %.4g, in %d window(s) from %s): its steps claim more FLOPs than the chips'' peak '
               || 'allows, so its PG is unknown and its productive time counts as unprofiled',
               totals.ideal_chip_s, totals.profiled_productive_chip_s, above_peak.highest_window_pg,
               above_peak.windows_above_peak, strftime(above_peak.first_window_above_peak, '%Y-%m-%dT%H:%MZ'))
            as reason
    from above_peak
    join totals using (job_id)
)

select * from final

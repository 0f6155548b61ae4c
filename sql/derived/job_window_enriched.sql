-- One row per job and window with the job's attributes and size class: the
-- base every mart aggregates. A job whose PG is set aside (pg_set_aside) has
-- no ideal and no profiled productive time here: unprofiled, like a job
-- without a sample. A job whose runtime was not measured (job_profiles) has its
-- held time as unmeasured_chip_s, not idle_chip_s; runtime_measured_chip_s is
-- the all-allocated time of jobs whose runtime was, which decides whether a
-- group's RG, PG and MPG are known (goodput_factors).
create or replace view job_window_enriched as
with

windows as (
    select * from job_window
),

attributes as (
    select * from job_attributes
),

profiles as (
    select job_id, profiled, runtime_measured from job_profiles
),

final as (
    select
        windows.date as day,
        windows.window_start,
        windows.job_id,
        attributes.* exclude (job_id, submit_time, end_time),
        windows.* exclude (date, window_start, job_id, version)
            replace (known_ideal(windows.ideal_chip_s, windows.productive_chip_s, profiles.profiled) as ideal_chip_s,
                     known_profiled(windows.profiled_productive_chip_s, profiles.profiled) as profiled_productive_chip_s,
                     case when profiles.runtime_measured then windows.idle_chip_s else 0.0 end as idle_chip_s),
        case when profiles.runtime_measured then 0.0 else windows.idle_chip_s end as unmeasured_chip_s,
        case when profiles.runtime_measured then windows.all_allocated_chip_s else 0.0 end as runtime_measured_chip_s
    from windows
    join attributes using (job_id)
    join profiles using (job_id)
)

select * from final

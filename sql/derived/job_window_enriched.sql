-- One row per job and window with the job's attributes and size class: the
-- base every mart aggregates. A job whose PG is set aside (pg_set_aside) has
-- no ideal and no profiled productive time here: unprofiled, like a job
-- without a sample.
create or replace view job_window_enriched as
with

windows as (
    select * from job_window
),

attributes as (
    select * from job_attributes
),

profiles as (
    select job_id, profiled from job_profiles
),

final as (
    select
        windows.date as day,
        windows.window_start,
        windows.job_id,
        attributes.* exclude (job_id, submit_time, end_time),
        windows.* exclude (date, window_start, job_id, version)
            replace (known_ideal(windows.ideal_chip_s, windows.productive_chip_s, profiles.profiled) as ideal_chip_s,
                     known_profiled(windows.profiled_productive_chip_s, profiles.profiled) as profiled_productive_chip_s)
    from windows
    join attributes using (job_id)
    join profiles using (job_id)
)

select * from final

-- One row per job and window with the job's attributes and size class: the
-- base every mart aggregates.
create or replace view job_window_enriched as
with

windows as (
    select * from job_window
),

attributes as (
    select * from job_attributes
),

final as (
    select
        windows.date as day,
        windows.window_start,
        windows.job_id,
        attributes.* exclude (job_id, submit_time, end_time),
        windows.* exclude (date, window_start, job_id, version)
    from windows
    join attributes using (job_id)
)

select * from final

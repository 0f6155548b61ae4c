-- One row per job: its attributes, chip-seconds per category over its whole
-- lifetime (demand base: requested chips x lifetime) and its goodput factors;
-- a job whose PG is set aside (pg_set_aside) has PG unknown and says why in pg_caveat; a job whose
-- runtime was not measured (job_profiles: a scheduler alone) has its held time as unmeasured_chip_s,
-- not idle, and RG, PG and MPG unknown. `unended_runs` counts the runs of its runtime that stopped
-- without an end mark (jobs.unended_runs), a caveat on its runtime figures.
create or replace view job_goodput as
with

attributes as (
    select * from job_attributes
),

windows as (
    select * from job_window
),

profiles as (
    select job_id, profiled, pg_caveat, runtime_measured from job_profiles
),

runs as (
    select job_id, unended_runs from jobs
),

totals as (
    select
        job_id,
        sum(lifetime_chip_s) as lifetime_chip_s,
        sum(queued_chip_s) as queued_chip_s,
        sum(partial_chip_s) as partial_chip_s,
        sum(all_allocated_chip_s) as all_allocated_chip_s,
        sum(productive_chip_s) as productive_chip_s,
        sum(pending_chip_s) as pending_chip_s,
        sum(lost_chip_s) as lost_chip_s,
        sum(data_wait_chip_s) as data_wait_chip_s,
        sum(compile_chip_s) as compile_chip_s,
        sum(checkpoint_save_chip_s) as checkpoint_save_chip_s,
        sum(checkpoint_restore_chip_s) as checkpoint_restore_chip_s,
        sum(init_chip_s) as init_chip_s,
        sum(case when runtime_measured then idle_chip_s else 0.0 end) as idle_chip_s,
        sum(case when runtime_measured then 0.0 else idle_chip_s end) as unmeasured_chip_s,
        sum(case when runtime_measured then all_allocated_chip_s else 0.0 end) as runtime_measured_chip_s,
        known_ideal(sum(ideal_chip_s), sum(productive_chip_s), any_value(profiled)) as ideal_chip_s,
        sum(known_profiled(profiled_productive_chip_s, profiled)) as profiled_productive_chip_s,
        any_value(pg_caveat) as pg_caveat,
        sum(held_chip_s) as held_chip_s,
        sum(clipped_runtime_chip_s) as clipped_runtime_chip_s
    from windows
    join profiles using (job_id)
    group by job_id
),

final as (
    select
        attributes.*,
        coalesce(totals.lifetime_chip_s, 0) as lifetime_chip_s,
        coalesce(totals.queued_chip_s, 0) as queued_chip_s,
        coalesce(totals.partial_chip_s, 0) as partial_chip_s,
        coalesce(totals.all_allocated_chip_s, 0) as all_allocated_chip_s,
        coalesce(totals.productive_chip_s, 0) as productive_chip_s,
        coalesce(totals.pending_chip_s, 0) as pending_chip_s,
        coalesce(totals.lost_chip_s, 0) as lost_chip_s,
        coalesce(totals.data_wait_chip_s, 0) as data_wait_chip_s,
        coalesce(totals.compile_chip_s, 0) as compile_chip_s,
        coalesce(totals.checkpoint_save_chip_s, 0) as checkpoint_save_chip_s,
        coalesce(totals.checkpoint_restore_chip_s, 0) as checkpoint_restore_chip_s,
        coalesce(totals.init_chip_s, 0) as init_chip_s,
        coalesce(totals.idle_chip_s, 0) as idle_chip_s,
        coalesce(totals.unmeasured_chip_s, 0) as unmeasured_chip_s,  -- held time no runtime telemetry describes
        totals.ideal_chip_s,  -- null when the job has no profile: unknown, not 0; 0 when profiled and nothing productive
        coalesce(totals.profiled_productive_chip_s, 0) as profiled_productive_chip_s,
        coalesce(totals.held_chip_s, 0) as held_chip_s,
        coalesce(totals.clipped_runtime_chip_s, 0) as clipped_runtime_chip_s,
        totals.pg_caveat,  -- why PG is unknown for a job with profiler samples (pg_set_aside), else null
        coalesce(runs.unended_runs, 0) as unended_runs,  -- runs of its runtime that stopped without an end mark
        unnest(goodput_factors(totals.all_allocated_chip_s, totals.productive_chip_s, totals.ideal_chip_s,
                               totals.profiled_productive_chip_s, totals.lifetime_chip_s, totals.runtime_measured_chip_s))
    from attributes
    left join totals using (job_id)
    left join runs using (job_id)
)

select * from final

-- badput_breakdown per UTC day, cluster and accelerator. The twelve job
-- categories share the demand base (the jobs' lifetime chip-time):
-- `unmeasured` is the held time of jobs whose runtime was not measured
-- (a scheduler alone), which is not `idle`;
-- idle_capacity is a share of the capacity base (chips online). Keep the two
-- bases apart: a period's share is sum(chip_s) / sum(base_chip_s) per base.
create or replace view badput_daily as
with

demand as (
    select
        day,
        cluster,
        accelerator,
        sum(queued_chip_s) as queued,
        sum(partial_chip_s) as partial,
        sum(productive_chip_s) as productive,
        sum(pending_chip_s) as pending,
        sum(lost_chip_s) as lost,
        sum(data_wait_chip_s) as data_wait,
        sum(compile_chip_s) as compile,
        sum(checkpoint_save_chip_s) as checkpoint_save,
        sum(checkpoint_restore_chip_s) as checkpoint_restore,
        sum(init_chip_s) as init,
        sum(idle_chip_s) as idle,
        sum(unmeasured_chip_s) as unmeasured,
        sum(lifetime_chip_s) as lifetime
    from job_window_enriched
    group by all
),

demand_categories as (
    unpivot demand
    on columns(* exclude (day, cluster, accelerator, lifetime))
    into name category value chip_s
),

capacity as (
    select * from fleet_daily
),

final as (
    select
        day,
        cluster,
        accelerator,
        category,
        'demand' as base,
        chip_s,
        lifetime as base_chip_s,
        ratio(chip_s, lifetime) as share
    from demand_categories
    union all
    select
        day,
        cluster,
        accelerator,
        'idle_capacity',
        'capacity',
        idle_capacity_chip_s,
        capacity_chip_s,
        ratio(idle_capacity_chip_s, capacity_chip_s)
    from capacity
)

select * from final

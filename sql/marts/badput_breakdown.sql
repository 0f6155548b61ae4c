-- Where the chip-time went. Job categories share the demand base (they sum
-- to the jobs' lifetime chip-time, so their shares sum to 1); idle capacity
-- is capacity no job held, a share of chips online.
create or replace view badput_breakdown as
with

demand as (
    select
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
        sum(lifetime_chip_s) as lifetime
    from job_window
),

demand_categories as (
    unpivot (select * exclude (lifetime) from demand)
    on columns(*)
    into name category value chip_s
),

-- Only windows whose capacity covers the chips held (see cluster_window), so
-- idle capacity is never negative.
capacity as (
    select
        sum(capacity_chip_s) as capacity_chip_s,
        greatest(sum(capacity_chip_s) - sum(held_chip_s), 0) as idle_capacity_chip_s
    from cluster_window
    where capacity_status = 'ok'
),

final as (
    select
        category,
        'demand' as base,
        chip_s / 3600 as chip_hours,
        ratio(chip_s, (select lifetime from demand)) as share
    from demand_categories
    union all
    select
        'idle_capacity',
        'capacity',
        idle_capacity_chip_s / 3600,
        ratio(idle_capacity_chip_s, capacity_chip_s)
    from capacity
)

select * from final

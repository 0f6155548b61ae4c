-- Clusters and accelerators whose jobs held chips in windows the capacity
-- telemetry does not cover (no CAPACITY level, or fewer chips online than
-- held): those windows are left out of every fleet figure, and this view
-- says which, so the exclusion is never silent.
create or replace view capacity_gaps as
with

windows as (
    select * from cluster_window
),

final as (
    select
        cluster,
        accelerator,
        capacity_status as problem,
        count(*) as windows,
        min(window_start) as first_window,
        max(window_start) as last_window,
        sum(held_chip_s) as held_chip_s,
        sum(all_allocated_chip_s) as all_allocated_chip_s,
        sum(capacity_chip_s) as capacity_chip_s
    from windows
    where capacity_status != 'ok'
    group by all
)

select * from final

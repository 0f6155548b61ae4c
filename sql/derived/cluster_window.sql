-- One row per event-time window, cluster and accelerator: the capacity online
-- and what the jobs there held and did. `capacity_status` says whether the
-- fleet figures may use the window: chips held where no CAPACITY level covers
-- them ('no_capacity') or more chips held than were online ('over_capacity')
-- mean the capacity telemetry is missing or wrong, and dividing by it would
-- show SG above 1 and negative idle capacity. Such windows are left out of
-- the fleet figures and listed in capacity_gaps.
create or replace view cluster_window as
with

capacity as (
    select date as day, window_start, cluster, accelerator, sum(capacity_chip_s) as capacity_chip_s
    from capacity_window
    group by all
),

usage as (
    select
        day,
        window_start,
        cluster,
        accelerator,
        sum(held_chip_s) as held_chip_s,
        sum(all_allocated_chip_s) as all_allocated_chip_s,
        sum(productive_chip_s) as productive_chip_s,
        sum(ideal_chip_s) as ideal_chip_s,
        sum(profiled_productive_chip_s) as profiled_productive_chip_s,
        sum(runtime_measured_chip_s) as runtime_measured_chip_s
    from job_window_enriched
    group by all
),

joined as (
    select
        day,
        window_start,
        cluster,
        accelerator,
        coalesce(capacity.capacity_chip_s, 0) as capacity_chip_s,
        coalesce(usage.held_chip_s, 0) as held_chip_s,
        coalesce(usage.all_allocated_chip_s, 0) as all_allocated_chip_s,
        coalesce(usage.productive_chip_s, 0) as productive_chip_s,
        usage.ideal_chip_s,
        coalesce(usage.profiled_productive_chip_s, 0) as profiled_productive_chip_s,
        coalesce(usage.runtime_measured_chip_s, 0) as runtime_measured_chip_s
    from capacity
    full outer join usage using (day, window_start, cluster, accelerator)
),

-- A cluster held exactly full sums its jobs' chip-seconds in floating point,
-- which may pass the capacity by rounding: over capacity means over by more
-- than a billionth.
final as (
    select
        *,
        case
            when held_chip_s > 0 and capacity_chip_s = 0 then 'no_capacity'
            when held_chip_s > capacity_chip_s * (1 + 1e-9) then 'over_capacity'
            else 'ok'
        end as capacity_status
    from joined
)

select * from final

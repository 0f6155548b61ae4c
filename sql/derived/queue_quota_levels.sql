-- The quota levels of Kueue's ClusterQueues and Cohorts (queue_quota), each once:
-- a level that two files state is one, and one of them where two files state
-- different figures from the same instant. Each holds from its start to the
-- next level of the same queue and flavor, or to the run's as-of time
-- (run_clock); a level seen after the as-of time has no length yet.
create or replace view queue_quota_levels as
with

levels as (
    select distinct * exclude (date) from queue_quota
),

one_per_instant as (
    select *
    from levels
    qualify row_number() over (
        partition by cluster, kind, name, flavor, start_time
        order by nominal_chips desc, usage_chips desc nulls last, borrowed_chips desc nulls last, cohort,
                 accelerator, borrowing_limit_chips desc nulls first, lending_limit_chips desc nulls first
    ) = 1
),

final as (
    select
        *,
        least(
            coalesce(lead(start_time) over (partition by cluster, kind, name, flavor order by start_time),
                     (select as_of from run_clock)),
            (select as_of from run_clock)
        ) as end_time
    from one_per_instant
)

select * from final

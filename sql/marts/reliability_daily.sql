-- Per UTC day, cluster and accelerator: how long jobs ran between
-- interruptions (TBI) and how long they took to restart (TTR), the figures an
-- operator tracks a fleet's reliability by. `running_s` is the time jobs held
-- all their requested chips (all-allocated chip-time / requested chips, summed
-- over jobs); `mean_tbi_s` = running_s / interruptions (null without one);
-- `mean_ttr_s` and `p90_ttr_s` are over the interruptions of the day that
-- restarted (until the job held all its chips again, or resumed work with a
-- runtime stream). An interruption counts on the day it happened.
create or replace view reliability_daily as
with

running as (
    select day, cluster, accelerator, sum(all_allocated_chip_s / requested_chips) as running_s
    from job_window_enriched
    group by all
),

cuts as (
    select
        day,
        cluster,
        accelerator,
        count(*) as interruptions,
        count(coalesce(recovered_s, reallocated_s)) as restarts,
        avg(coalesce(recovered_s, reallocated_s)) as mean_ttr_s,
        quantile_cont(coalesce(recovered_s, reallocated_s), 0.9) as p90_ttr_s
    from interruptions
    group by all
),

final as (
    select
        day,
        cluster,
        accelerator,
        coalesce(running.running_s, 0) as running_s,
        coalesce(cuts.interruptions, 0) as interruptions,
        ratio(coalesce(running.running_s, 0), cuts.interruptions) as mean_tbi_s,
        coalesce(cuts.restarts, 0) as restarts,
        cuts.mean_ttr_s,
        cuts.p90_ttr_s
    from running
    full outer join cuts using (day, cluster, accelerator)
)

select * from final

-- One row per interruption: a running attempt cut by a PREEMPT below its
-- request, a FAIL or a CANCEL (docs/metric.md, "Why jobs stopped"), with the
-- job's attributes. recovery_chip_s is the requested chips × the time until
-- the job resumed work (recovered_s), or, without a runtime stream, until it
-- held all its chips again (reallocated_s); 0 for an interruption that ended
-- the job. cost_chip_s = the work thrown away + that recovery.
create or replace view interruptions as
with

cuts as (
    select job_id, unnest(interruptions, recursive := true)
    from jobs
),

final as (
    select
        cast(timezone('UTC', cuts.time) as date) as day,  -- the UTC day, whatever the session's zone
        cuts.job_id,
        attributes.cluster,
        attributes.accelerator,
        attributes.team,
        attributes.queue,
        attributes.workload,
        attributes.size_class,
        attributes.requested_chips,
        cuts.time,
        cuts.event,
        cuts.cause,
        cuts.reason,
        cuts.run_s,
        cuts.reallocated_s,
        cuts.recovered_s,
        cuts.lost_chip_s,
        attributes.requested_chips * coalesce(cuts.recovered_s, cuts.reallocated_s, 0) as recovery_chip_s,
        cuts.lost_chip_s + attributes.requested_chips * coalesce(cuts.recovered_s, cuts.reallocated_s, 0)
            as cost_chip_s
    from cuts
    join job_attributes as attributes using (job_id)
)

select * from final

-- Goodput per queue (demand base): a job's whole queue path, Kueue's
-- <ClusterQueue>/<namespace>/<LocalQueue>; see goodput_by_segment.
create or replace view goodput_by_queue as
select segment as queue, * exclude (dimension, segment)
from goodput_by_segment
where dimension = 'queue'

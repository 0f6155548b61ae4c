-- Goodput per cluster queue (demand base): the first level of a job's queue
-- path, the queue whose quota it draws from; see goodput_by_segment.
create or replace view goodput_by_cluster_queue as
select segment as cluster_queue, * exclude (dimension, segment)
from goodput_by_segment
where dimension = 'cluster_queue'

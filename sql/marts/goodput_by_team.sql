-- Goodput per team (demand base); see goodput_by_segment.
create or replace view goodput_by_team as
select segment as team, * exclude (dimension, segment)
from goodput_by_segment
where dimension = 'team'

"""`DaskRunner`: Beam's DaskRunner with its ParDo translated so that it computes this pipeline whole.

`mpg run --runner dask --dask_client_address tcp://HOST:8786` computes a run
on a dask.distributed cluster (docs/scale.md) with this runner, which Beam
creates by its name (`--runner fleet_goodput.pipelines.on_dask.DaskRunner`);
nothing else imports this module, so only a run on Dask needs dask installed.

Beam's DaskRunner turns each Beam step into a Dask bag. In apache-beam 2.77
(`apache_beam/runners/dask/dask_runner.py` and `transform_evaluator.py`) its
ParDo and its choice of what to compute lose data this pipeline needs:

- a step's bag holds everything the step outputs, so a consumer of one
  tagged output receives all of them (its visitor keys bags by step);
- what a DoFn outputs in `finish_bundle` is dropped (`apply_dofn_to_bundle`
  gathers a bundle's outputs before it calls `finish_bundle`);
- a step's bundles share one list of outputs, so a bundle computed again in
  the same process (a side input is computed inside each task that reads it)
  outputs those of the bundles before it too;
- only the last step's bag is computed, with what it depends on, so every
  other write never runs.

Here each ParDo's bundle gathers its own outputs after `finish_bundle`, with
their tags; each output is its own bag; and every output no step reads is
computed. The rest is Beam's: its overrides, its translations of Create,
GroupByKey and Flatten, its side inputs, options and result. Beam's runner
code is Apache-2.0, as this project; the parts taken from it (the visitor,
`run_pipeline`) are kept to its shape. A bundle runs through DoFnRunner, as
in Beam's own workers, where Beam's Dask ParDo builds the private
_OutputHandler itself. Tested with apache-beam 2.77.
tests/pipelines/test_dask.py runs the pipeline both ways and shows what Beam's runner loses.
"""

from __future__ import annotations

import functools

from apache_beam import pvalue
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import DoFnRunner
from apache_beam.runners.dask import dask_runner, transform_evaluator
from apache_beam.runners.dask.overrides import dask_overrides
from apache_beam.runners.dask.transform_evaluator import (
    TRANSLATIONS,
    DaskBagWindowedIterator,
    Flatten,
    NoOp,
    OneReceiver,
    ParDo,
    get_windowed_value,
)
from apache_beam.transforms.core import Windowing
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindows


class DaskRunner(dask_runner.DaskRunner):
    """Executes a pipeline on a dask.distributed cluster, every output of every step kept apart and computed."""

    def run_pipeline(self, pipeline, options):
        import dask.distributed

        dask_options = options.view_as(dask_runner.DaskOptions).get_all_options(drop_default=True, current_only=True)
        bag_kwargs = dask_runner.DaskOptions._extract_bag_kwargs(dask_options)
        client = dask.distributed.Client(**dask_options)
        pipeline.replace_all(dask_overrides())
        bags = _Bags(bag_kwargs)
        pipeline.visit(bags)
        # Each unread output is counted, not gathered: its rows stay on the workers.
        return _Result(client, client.compute([bag.count() for bag in bags.unread()]))


class _Result(dask_runner.DaskRunnerResult):
    def wait_until_finish(self, duration=None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            self.client.close()  # Beam's result leaves its connection to the scheduler open


class _Bags(PipelineVisitor):
    """Every PCollection of a pipeline → its Dask bag (Beam's `DaskBagVisitor` keys them by step)."""

    def __init__(self, bag_kwargs: dict):
        self.bag_kwargs = bag_kwargs
        self.bags = {}  # PCollection → bag
        self.read = set()  # the PCollections a step reads, as a main or a side input

    def visit_transform(self, node: AppliedPTransform) -> None:
        op = TRANSLATIONS.get(node.transform.__class__, NoOp)(node, bag_kwargs=self.bag_kwargs)
        inputs = [None if isinstance(pcoll, pvalue.PBegin) else self.bags[pcoll] for pcoll in node.inputs]
        self.read.update(node.inputs)
        self.read.update(side.pvalue for side in node.side_inputs)
        input_bag = inputs if isinstance(op, Flatten) or len(inputs) > 1 else next(iter(inputs), None)
        side_inputs = [
            SideInputMap(
                type(side),
                side._view_options(),
                DaskBagWindowedIterator(self.bags[side.pvalue], side._window_mapping_fn),
            )
            for side in node.side_inputs
        ]
        if isinstance(op, ParDo):
            outputs = _apply_pardo(node, input_bag, side_inputs)
            for pcoll in node.outputs.values():
                self.bags[pcoll] = outputs.filter(functools.partial(_has_tag, tag=pcoll.tag)).map(_value)
        else:
            bag = op.apply(input_bag, side_inputs or None)
            for pcoll in node.outputs.values():
                self.bags[pcoll] = bag

    def unread(self) -> list:
        return [bag for pcoll, bag in self.bags.items() if pcoll not in self.read]


def _apply_pardo(node: AppliedPTransform, input_bag, side_inputs: list):
    """The ParDo's bag of (tag, value) pairs, every bundle's own (transform_evaluator.ParDo, which shares them)."""
    transform = node.transform
    args, kwargs = transform.raw_side_inputs
    main_input = next(iter(node.main_inputs.values()))
    window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
    return input_bag.map(get_windowed_value, window_fn).map_partitions(
        _outputs_of_bundle, transform.fn, window_fn, transform.label, side_inputs, list(args), kwargs
    )


def _outputs_of_bundle(items, fn, window_fn, label: str, side_inputs, args, kwargs) -> list:
    """Run `fn` over one bundle (a partition of the bag); its outputs, those of `finish_bundle` too, as (tag, value)."""
    receivers = OneReceiver()  # a TaggedOutput(tag, windowed value) per tagged output; a windowed value per main one
    windowing = Windowing(window_fn or GlobalWindows())
    runner = DoFnRunner(fn, args, kwargs, side_inputs, windowing, tagged_receivers=receivers, step_name=label)
    runner.setup()
    runner.start()
    for item in items:
        runner.process(item)
    runner.finish()
    runner.teardown()
    return [
        (output.tag, output.value.value)
        if isinstance(output, transform_evaluator.TaggedOutput)
        else (None, output.value)
        for output in receivers.values
    ]


def _has_tag(pair, tag) -> bool:
    return pair[0] == tag


def _value(pair):
    return pair[1]

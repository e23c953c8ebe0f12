"""The what-if: a backward profile and a scaling model -> the full-utilization scaling calculation.

backward_profile and torch_profile give the per-tensor gradient timings, gradient_buckets the DDP/Horovod bucket
rule, paper and model the two scaling models (Zhang et al. 2020's, and ringscope's refinements), replay binds a
model to a profile, calculation runs the points asked (what_if, the replay error) into the what-if record
(analyze.model.findings.WhatIf), verdict words the answer and inputs takes the measured quantities from a typed
Result. request turns option strings into a what-if; attach adds the what-if to an analyzed result. It never reads
captures.
"""

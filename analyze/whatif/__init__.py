"""The what-if: a backward profile and a scaling model -> the full-utilization scaling calculation.

backward_profile and torch_profile give the per-tensor gradient timings, gradient_buckets the DDP/Horovod
bucket rule, paper and model the two scaling models (Zhang et al. 2020's, and ringscope's refinements),
calculation replays them (what_if, the replay error), verdict words the answer and inputs takes the
measured quantities from a result's JSON form. It never reads captures.
"""

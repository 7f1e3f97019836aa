"""Kueue's rules as a pure library: quota and cohorts, flavor assignment and admission,
preemption, ordering, fair sharing, topology, and a replay of job histories over them.

No Django, no HTTP, no store: the model takes the cluster's objects as Kubernetes dicts and
reports what it decides to a listener. It imports nothing of Quartermaster's; kubesim's Kueue
controller and the portal's planning drive it. The modules follow Kueue's own scheduler:

- resources, selectors: quantities and pod requests; label selectors, affinity and taints
- types: Quota, CQ (a ClusterQueue), WL (a Workload), PodSet, the workload states
- cohorts: quota and cohort arithmetic over cohort trees, dominant resource shares
- afs: admission fair sharing (the LocalQueues' usage memory)
- tas: topology-aware scheduling (domains, capacity, placement)
- flavorassigner: flavors for a workload's pod sets, and Kueue's message when none fit
- preemption: classical and fair-sharing victims, and their order
- queue: ordering (BestEffortFIFO, StrictFIFO, queue heads) and the default strategy
- scheduler: the scheduling cycle (two passes, fair-sharing tournament)
- model: the state and the transitions (admit, evict, finish), the Listener a driver gets
- replay: a job history replayed on a simulated clock (with its Buckets strategy), side by
  side in processes (replay.parallel)
- estimate: when jobs waiting now would start, by a small simulation
"""

"""The scheduling cycle: what fits without borrowing first, then the borrowers in the order of
their queues' heads; under fair sharing, the borrower whose queue has the lowest share."""

from tests.kueuemodel.builders import admitted, cluster_queue, model_of, submit, workload


def test_workloads_within_nominal_quota_go_before_borrowers():
    """b's borrower is older, but a's workload fits in a's own quota and goes first; what is
    left, b borrows."""
    model = model_of([cluster_queue("a", {"a100": 4}), cluster_queue("b", {"a100": 2})])
    submit(model, workload("b-borrows", "b", 5), workload("a-own", "a", 3))
    model.schedule()
    assert admitted(model) == {"a-own"}
    assert [e[0] for e in model.listener.of("admitted")] == ["a-own"]
    submit(model, workload("b-fits", "b", 3))
    model.schedule()
    assert admitted(model) == {"a-own", "b-fits"}


def test_borrowers_go_in_the_order_of_their_queues_heads_not_their_names():
    """Both must borrow and only one can: the queue whose head is older wins, whatever the
    queues are called."""
    model = model_of([cluster_queue("a", {"a100": 1}), cluster_queue("z", {"a100": 1}),
                      cluster_queue("lender", {"a100": 4})])  # fmt: skip
    submit(model, workload("z-first", "z", 4), workload("a-second", "a", 4))
    model.schedule()
    assert admitted(model) == {"z-first"}


def test_with_fair_sharing_the_lower_share_borrows_first():
    """a already borrows 2; a and b each ask to borrow 2 more, of which there is room for one:
    under fair sharing b (no share) goes first although a's workload is older."""
    model = model_of([cluster_queue("a", {"a100": 2}), cluster_queue("b", {"a100": 2}),
                      cluster_queue("lender", {"a100": 4})], fair_sharing=True)  # fmt: skip
    submit(model, workload("a-borrows", "a", 4))
    model.schedule()
    submit(model, workload("a-more", "a", 2), workload("b-borrows", "b", 4))
    model.schedule()
    assert admitted(model) == {"a-borrows", "b-borrows"}
    assert model.share(model.cqs["a"]).weighted == model.share(model.cqs["b"]).weighted > 0

"""A poptorch.DataLoader whose dataset is smaller than one step says so:
a warning when it is built, an Error naming the numbers and the fix when it
is iterated, in every mode, instead of training zero steps."""
import pytest
import torch

import poptorch

DATASET = torch.utils.data.TensorDataset(torch.randn(10, 2))
MESSAGE = (r"yields no batch: it reads 10 sample\(s\), and one step takes 12 "
           r"sample\(s\) \(batch_size 3 x deviceIterations 4 .*pass "
           r"drop_last=False")


@pytest.mark.parametrize("mode", list(poptorch.DataLoaderMode))
def test_a_dataset_smaller_than_one_step_is_reported(mode, log_records):
    opts = poptorch.Options().deviceIterations(4)
    loader = poptorch.DataLoader(opts, DATASET, batch_size=3, mode=mode)
    assert any("yields no batch" in r.getMessage() for r in log_records)
    with pytest.raises(poptorch.Error, match=MESSAGE):
        for _ in loader:
            pass
    loader.terminate()


def test_a_batch_sampler_with_too_few_batches_is_reported():
    opts = poptorch.Options().deviceIterations(4)
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(DATASET), batch_size=5,
        drop_last=False)
    loader = poptorch.DataLoader(opts, DATASET, batch_sampler=sampler)
    with pytest.raises(poptorch.Error, match=r"its batch_sampler gives 2 "
                       r"batch\(es\), and one step takes 20 sample"):
        list(loader)


def test_drop_last_false_keeps_the_short_batch():
    opts = poptorch.Options().deviceIterations(4)
    loader = poptorch.DataLoader(opts, DATASET, batch_size=3, drop_last=False)
    batches = list(loader)
    assert len(batches) == 1 and batches[0][0].shape[0] == 10

"""The paper's four models build and take training steps on the CPU."""

import pytest

pytest.importorskip("tensorflow")

from runner_helpers import checkpoint_values, small_config  # noqa: E402

from slim_models.nets_factory import PAPER_MODELS, min_image_size  # noqa: E402
from tfgshare.runner import main as runner  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("model", PAPER_MODELS)
def test_paper_model_trains_two_steps_and_checkpoints(tmp_path, model):
    size = min_image_size(model)
    events = []
    result = runner.train(
        small_config(tmp_path, model_name=model, image_size=size, batch_size=1,
                     max_number_of_steps=2, optimizer="sgd", learning_rate=0.001,
                     num_classes=5, num_sample_steps=1, deterministic=False),
        on_event=events.append)
    assert result.status == "finished" and result.global_step == 2
    progress = [e for e in events if e["event"] == "progress"]
    assert [e["step"] for e in progress] == [1, 2]
    assert all(e["loss"] > 0 for e in progress)
    values = checkpoint_values(result.checkpoint)
    heads = [k for k, v in values.items() if k.endswith("weights/.ATTRIBUTES/VARIABLE_VALUE")
             and v.shape[-1] == 5]
    assert heads, "no 5-class classifier weights in the checkpoint"
    assert int(values["variables/global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 2

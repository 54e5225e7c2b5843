from runner.masking import MASK, looks_secret, masked_env


def test_variables_that_look_secret_are_masked_and_others_kept():
    env = {"HF_TOKEN": "hf_x", "WANDB_API_KEY": "k", "aws_secret_access_key": "s", "DB_PASSWORD": "p",
           "NCCL_DEBUG": "INFO", "EMPTY_TOKEN": ""}
    assert masked_env(env) == {"HF_TOKEN": MASK, "WANDB_API_KEY": MASK, "aws_secret_access_key": MASK,
                               "DB_PASSWORD": MASK, "NCCL_DEBUG": "INFO", "EMPTY_TOKEN": ""}
    assert not looks_secret("OMP_NUM_THREADS")

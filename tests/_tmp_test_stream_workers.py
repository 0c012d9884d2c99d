from test_resume import run_kill_and_resume, tiny_recipes, one_thread  # noqa: F401
def test_streamed_workers(tmp_path):
    run_kill_and_resume(tiny_recipes()[0], tmp_path, "--streaming", "--dataloader_num_workers", "2")

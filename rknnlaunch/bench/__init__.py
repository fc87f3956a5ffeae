"""The benchmark behind `rknnlaunch bench`: its cases, runner, report and one run from its options."""

from dpsynth_cli.cli import main

main()

from vramtune.cli import main

main()

from dispatch.cli import main

main()

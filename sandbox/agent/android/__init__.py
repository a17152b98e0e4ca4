"""The android sandbox's driver: an Android emulator in the container, driven through its gRPC controller
(screenshots, touch, keys) where it answers and through ADB otherwise (and always for what only ADB does: text on
old images, ``open_app``, ``uiautomator dump``, ``sys.boot_completed``, screen recording). Resets load an emulator
snapshot through the emulator console. See docs/android.md.
"""
